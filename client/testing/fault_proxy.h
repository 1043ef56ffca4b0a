// FaultProxy: a RESP-aware relay between a client and a real kvtierd server on Unix sockets, for
// the faults a real server produces only under timing, or never: a reply that is not RESP, a
// connection closed before its answer, replies held back until a number of commands has arrived
// (which only a pipelining client survives), and an action run the moment a command arrives
// (tests advance the store's clock there, so a lease lapses between KVT.ACQUIRE and KVT.RELEASE
// as it does under a slow copy). It also logs the name of every command, so a test can check what
// the client sent.
//
// Why a relay and not knobs in the server: these faults are protocol-level (bytes the server must
// never send, an order it never chooses), and putting them in the daemon would put test code on
// its data path. Everything else, including each answer, comes from the server behind the relay.
//
// Every command is forwarded (re-encoded as an array of bulk strings) unless a fault takes it;
// each upstream reply goes back in order, and a descriptor passed with SCM_RIGHTS (KVT.ATTACH)
// rides on the first byte of the reply it came with. One thread ("fault-proxy") serves every
// connection with non-blocking sockets; the knobs may be set from any thread at any time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"

namespace kvtier::client::testing {

class FaultProxy {
 public:
  // Listens on a fresh Unix socket and relays each connection to the server at `upstream_path`.
  // Aborts the test binary when the socket cannot be set up.
  explicit FaultProxy(std::string upstream_path);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // "unix://..." of the relay.
  std::string url() const { return "unix://" + socket_path_; }

  // Replies are passed on only once a connection has sent at least this many commands in all.
  std::atomic<uint64_t> hold_replies_until{0};
  // The next command named so (upper case) is answered with these raw bytes instead of going on.
  void SetRawReply(std::string command, std::string raw) EXCLUDES(mu_);
  // The next command named so closes the connection (both sides) without an answer.
  void SetCloseOn(std::string command) EXCLUDES(mu_);
  // Every command named so runs `action` on the relay thread before it goes on. The action must
  // not call the relay.
  void OnCommand(std::string command, std::function<void()> action) EXCLUDES(mu_);

  // Upper-case names of every command received, in order.
  std::vector<std::string> commands() const EXCLUDES(mu_);

  struct Link;  // one relayed connection; defined in fault_proxy.cc

 private:
  enum class Fault { kNone, kRawReply, kClose };
  // Logs `name` and says what happens to it; `raw` gets the reply of kRawReply. Runs the action.
  Fault Take(const std::string& name, std::string* raw) EXCLUDES(mu_);
  void Serve();
  // Reads what the client sent and handles every complete command. false: drop the link.
  bool FromClient(Link& link);
  // Reads what the server sent and files it under the commands it answers. false: drop the link.
  bool FromUpstream(Link& link);
  // Passes on the replies that are due and writes what it can both ways. false: drop the link.
  bool Pump(Link& link);
  void Accept();

  std::string upstream_path_;
  std::string dir_;
  std::string socket_path_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  mutable Mutex mu_;
  std::vector<std::string> commands_ GUARDED_BY(mu_);
  std::map<std::string, std::string> raw_replies_ GUARDED_BY(mu_);
  std::string close_on_ GUARDED_BY(mu_);
  std::map<std::string, std::function<void()>> actions_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Link>> links_;  // relay thread only
  std::thread thread_;
};

}  // namespace kvtier::client::testing

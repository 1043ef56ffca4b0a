// FakeServer: a small in-process stand-in for kvtierd, for the client's tests.
//
// It speaks the RESP2 side of docs/protocol.md for the commands the client sends (PING, AUTH,
// CLIENT, SET, GET, KVT.REGISTER/LOOKUP/PUT/GET/ATTACH/RESERVE/COMMIT/ABORT/ACQUIRE/RELEASE/PIN/
// DEL/DROP/STATS) over a Unix socket or TCP on 127.0.0.1, keeping blocks in a memfd arena that it
// passes with SCM_RIGHTS like the daemon does. It has no eviction, no tiers beyond "host" and no
// limits: it exists to check what the client sends and how it reads the answers. Knobs script the
// cases a real daemon produces only under timing: leases that expired before their release,
// reservations that expired before their commit, a reply that is not RESP, a closed connection,
// and replies held back until a number of commands has arrived (which only a pipelining client
// survives).
//
// One thread ("fake-kvtierd") serves every connection; the knobs may be set from the test thread
// at any time (they are atomics or locked). Not for production: blocking writes, a bump allocator.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"

namespace kvtier::client::testing {

class FakeServer {
 public:
  struct Options {
    bool tcp = false;
    std::string password;  // non-empty: AUTH required
    uint64_t arena_bytes = uint64_t{4} << 20;
  };

  // Starts listening and serving. Aborts the test binary when the socket cannot be set up.
  explicit FakeServer(Options options);
  FakeServer() : FakeServer(Options{}) {}
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  std::string url() const { return url_; }

  // RELEASE answers NOTFOUND (the lease had timed out).
  std::atomic<bool> expire_leases{false};
  // COMMIT answers NOTFOUND (the reservation had timed out).
  std::atomic<bool> expire_reservations{false};
  // ACQUIRE grants at most this many leases per command and answers NOTFOUND for the rest even
  // when present, as the daemon does for blocks outside the host arena (on NVMe, in the GPU pool).
  std::atomic<uint64_t> acquire_limit{UINT64_MAX};
  // Replies are written only once a connection has sent at least this many commands in all.
  std::atomic<uint64_t> hold_replies_until{0};
  // The next command named so (upper case) is answered with these raw bytes instead.
  void SetRawReply(std::string command, std::string raw) EXCLUDES(mu_);
  // The next command named so closes the connection without an answer.
  void SetCloseOn(std::string command) EXCLUDES(mu_);

  // Upper-case names of every command received, in order.
  std::vector<std::string> commands() const EXCLUDES(mu_);
  // Blocks stored (inline or committed), all namespaces.
  size_t block_count() const EXCLUDES(mu_);

  struct State;  // the served state; defined in fake_server.cc

 private:
  void Serve();
  // Feeds bytes of one connection (a Conn of fake_server.cc) and answers what completes.
  void ServeBytes(void* conn, std::string_view input) EXCLUDES(mu_);

  Options options_;
  std::string dir_;
  std::string url_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  mutable Mutex mu_;
  std::unique_ptr<State> state_ PT_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvtier::client::testing

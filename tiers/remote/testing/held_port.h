// HeldPort: a listener that stands at a dead node's port for a test. It answers only READONLY: a
// connection whose first command is a GET is held open until Release(); any other (a map query,
// say) is closed at once. A call routed there by a stale slot map stays out, and fails only when
// the test says (or is answered with the reply the test gives), so that the test can change the
// client's map while the call is out.
//
// Thread safety: every method may be called from any thread. The destructor closes every
// connection and joins the accepting thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

namespace kvtier::tiers::remote::testing {

class HeldPort {
 public:
  // Listens at 127.0.0.1:`port`, which the dead node's process has let go.
  static Result<std::unique_ptr<HeldPort>> Open(uint16_t port);
  ~HeldPort();
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;

  // Whether a GET arrived (and is held) within `timeout`.
  bool WaitForGet(std::chrono::milliseconds timeout);
  // Closes the held connections: their calls see the node close them.
  void Release();
  // Sends `reply` (RESP bytes) on every held connection, as the answer to its GET; they stay held.
  void Answer(std::string_view reply);
  // Whether the client has closed every held connection (at least one), seen without waiting.
  bool HeldClosedByClient();
  // How many GETs have arrived since the port opened, each on a connection of its own.
  size_t gets_held();

 private:
  explicit HeldPort(int listen_fd);
  void AcceptLoop();
  void Serve(int fd);

  const int listen_fd_;
  std::mutex mu_;
  std::condition_variable got_get_;
  std::vector<int> held_;  // guarded by mu_
  size_t gets_held_ = 0;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kvtier::tiers::remote::testing

// PeriodicThread: one named thread that runs a task every interval until it is destroyed.
//
// kvtierd's housekeeping runs on these: taking back lapsed leases, the background mover that
// keeps the host tier below its high watermark, and the NVMe tier's periodic sync. The destructor
// stops the thread and joins it (nothing is detached); a task in progress finishes first.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace kvtier::daemon {

class PeriodicThread {
 public:
  // `name` (at most 15 characters) shows in top and gdb.
  PeriodicThread(std::string name, std::chrono::milliseconds interval, std::function<void()> task);
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  void Run();

  const std::string name_;
  const std::chrono::milliseconds interval_;
  const std::function<void()> task_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above is set
};

}  // namespace kvtier::daemon

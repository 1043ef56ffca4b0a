#include "daemon/kvtierd/periodic_thread.h"

#include <pthread.h>

namespace kvtier::daemon {

PeriodicThread::PeriodicThread(std::string name, std::chrono::milliseconds interval,
                               std::function<void()> task)
    : name_(std::move(name)), interval_(interval), task_(std::move(task)), thread_([this] {
        Run();
      }) {}

PeriodicThread::~PeriodicThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PeriodicThread::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    task_();
    lock.lock();
  }
}

}  // namespace kvtier::daemon

#include "daemon/server/gpu_importers.h"

namespace kvtier::server {

GpuImporters::Hold GpuImporters::Add() {
  MutexLock lock(mu_);
  ++count_;
  return Hold(this);
}

size_t GpuImporters::count() const {
  MutexLock lock(mu_);
  return count_;
}

void GpuImporters::Drop() {
  MutexLock lock(mu_);
  if (--count_ == 0) none_left_.notify_all();
}

size_t GpuImporters::WaitForNone(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  // The condition variable unlocks and relocks mu_ itself, which the analysis cannot follow.
  while (count_ > 0) {
    if (none_left_.wait_until(mu_, deadline) == std::cv_status::timeout) break;
  }
  return count_;
}

}  // namespace kvtier::server

// GpuImporters: the connections that hold the daemon's GPU pool mapped, so that shutdown does not
// free the pool under them.
//
// A connection takes a Hold when it sends KVT.GPUATTACH and drops it on KVT.GPUDETACH or when it
// closes (its Session owns the Hold). A client process that dies closes its connection and loses
// its mapping with it; a client that is told the daemon is stopping (every command of an attached
// connection answers -SHUTDOWN once shutdown begins, docs/protocol.md) closes its import, then
// detaches or disconnects. Shutdown (Server::DrainGpuImporters) waits for the holds to go, for at
// most a bounded time, before the pool is freed: a client that makes no call in that time (the
// C++ Client reads its socket only during its own calls) cannot hear the news, so the wait cannot
// be unbounded.
//
// Thread-safe: holds are taken and dropped on connection strands, WaitForNone runs on the thread
// that stops the daemon.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <utility>

#include "common/thread_annotations.h"

namespace kvtier::server {

class GpuImporters {
 public:
  // One connection's mapping. Move-only; dropping it (or destroying it) ends it.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
    Hold& operator=(Hold&& other) noexcept {
      if (this != &other) {
        Reset();
        owner_ = std::exchange(other.owner_, nullptr);
      }
      return *this;
    }
    ~Hold() { Reset(); }
    bool held() const { return owner_ != nullptr; }
    void Reset() {
      if (owner_ != nullptr) std::exchange(owner_, nullptr)->Drop();
    }

   private:
    friend class GpuImporters;
    explicit Hold(GpuImporters* owner) : owner_(owner) {}
    GpuImporters* owner_ = nullptr;
  };

  GpuImporters() = default;
  GpuImporters(const GpuImporters&) = delete;
  GpuImporters& operator=(const GpuImporters&) = delete;

  Hold Add();
  size_t count() const;
  // Waits until no hold is left or `timeout` has passed; returns the holds left (0: none).
  size_t WaitForNone(std::chrono::milliseconds timeout);

 private:
  void Drop();

  mutable Mutex mu_;
  std::condition_variable_any none_left_;
  size_t count_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::server

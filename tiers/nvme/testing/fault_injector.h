// FaultInjector: a CompletionFilter that scripts I/O faults for tests of the NVMe tier.
//
// Installed through IoBackendConfig::fault_filter, it sits inside a real backend (io_uring or the
// thread pool) and rewrites completions after the kernel has done the transfer: EIO and ENOSPC
// become errors, kShort halves the byte count (the backend must resubmit the rest), kEagain makes
// the backend retry. A short transfer stays a multiple of 4 KiB. Faults fire on the Nth matching completion, or at a seeded rate, so a failing
// run can be replayed. Rules may be changed at any time (Set), for example to stop faults before a
// verification pass.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <random>

#include "tiers/nvme/io_backend.h"

namespace kvtier::tiers::nvme::testing {

enum class Fault : uint8_t { kNone, kEio, kEnospc, kShort, kEagain };

struct FaultRule {
  Fault fault = Fault::kNone;
  bool reads = true;    // applies to read completions
  bool writes = true;   // applies to write completions
  uint64_t nth = 0;     // > 0: fire on the nth matching completion only (1-based)
  double rate = 0.0;    // otherwise: fire with this probability
  uint64_t seed = 1;
};

class FaultInjector final : public CompletionFilter {
 public:
  explicit FaultInjector(FaultRule rule = {}) { Set(rule); }

  // Replaces the rule and restarts the completion count and the random sequence.
  void Set(const FaultRule& rule) {
    std::lock_guard<std::mutex> lock(mu_);
    rule_ = rule;
    seen_ = 0;
    rng_.seed(rule.seed);
  }

  int64_t Filter(const IoRequest& request, int64_t result) override {
    std::lock_guard<std::mutex> lock(mu_);
    bool matches = request.op == IoOp::kRead ? rule_.reads : rule_.writes;
    if (rule_.fault == Fault::kNone || !matches || result < 0) return result;
    ++seen_;
    bool fire = rule_.nth > 0 ? seen_ == rule_.nth
                              : std::uniform_real_distribution<double>(0, 1)(rng_) < rule_.rate;
    if (!fire) return result;
    ++injected_;
    switch (rule_.fault) {
      case Fault::kEio: return -EIO;
      case Fault::kEnospc: return -ENOSPC;
      case Fault::kShort: {
        // Half, rounded down to 4 KiB as the kernel does for O_DIRECT: the rest must stay aligned.
        int64_t shorter = (result / 2) & ~int64_t{4095};
        return shorter > 0 ? shorter : result;
      }
      case Fault::kEagain: return -EAGAIN;
      case Fault::kNone: break;
    }
    return result;
  }

  // The next `count` io_uring submissions are refused with -`err` (the kernel's ENOMEM, say).
  void RefuseSubmissions(uint64_t count, int err = ENOMEM) {
    std::lock_guard<std::mutex> lock(mu_);
    refused_submissions_ = count;
    submit_error_ = err;
  }

  int RefuseSubmit() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refused_submissions_ == 0) return 0;
    --refused_submissions_;
    return -submit_error_;
  }

  // Faults injected since construction.
  uint64_t injected() const {
    std::lock_guard<std::mutex> lock(mu_);
    return injected_;
  }

 private:
  mutable std::mutex mu_;
  FaultRule rule_;
  uint64_t seen_ = 0;
  uint64_t injected_ = 0;
  uint64_t refused_submissions_ = 0;
  int submit_error_ = ENOMEM;
  std::mt19937_64 rng_;
};

}  // namespace kvtier::tiers::nvme::testing

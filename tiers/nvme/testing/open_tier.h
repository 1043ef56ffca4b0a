// Opening an NvmeTier in a test that cannot go on without one.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "tiers/nvme/nvme_tier.h"

namespace kvtier::tiers::nvme::testing {

// The tier Open makes of `o`; a failure to open is reported and ends the test binary.
inline std::unique_ptr<NvmeTier> MustOpen(const NvmeTier::Options& o) {
  auto tier = NvmeTier::Open(o);
  if (!tier.ok()) {
    ADD_FAILURE() << tier.status().ToString();
    std::abort();  // the test cannot go on without a tier
  }
  return std::move(tier).value();
}

}  // namespace kvtier::tiers::nvme::testing

#include "common/cuda/probe.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/cuda/pinned_host_range.h"

namespace kvtier::cuda {
namespace {

// Runs in every build, with or without a device: the answers must agree with each other.
TEST(ProbeTest, PinningFollowsTheProbe) {
  const Status probe = ProbeDevice(0);
  std::vector<std::byte> memory(1 << 20);
  PinnedHostRange range = PinnedHostRange::Register(memory.data(), memory.size());
  if (!BuiltWithCuda()) {
    EXPECT_EQ(probe.code(), StatusCode::kRejected);
    EXPECT_NE(probe.message().find("KVTIER_WITH_CUDA=OFF"), std::string::npos) << probe.message();
  }
  if (probe.ok()) {
    EXPECT_TRUE(range.pinned()) << range.status().ToString();
  } else {
    EXPECT_FALSE(range.pinned());
    EXPECT_FALSE(range.status().ok());
    EXPECT_FALSE(probe.message().empty());
  }
}

TEST(ProbeTest, ANegativeOrMissingDeviceIsNeverUsable) {
  EXPECT_FALSE(ProbeDevice(-1).ok());
  EXPECT_FALSE(ProbeDevice(4096).ok());
}

TEST(ProbeTest, AnEmptyRangeIsNotPinned) {
  PinnedHostRange range = PinnedHostRange::Register(nullptr, 0);
  EXPECT_FALSE(range.pinned());
  EXPECT_FALSE(range.status().ok());
}

}  // namespace
}  // namespace kvtier::cuda

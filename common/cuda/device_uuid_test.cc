#include "common/cuda/device_uuid.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::cuda {
namespace {

DeviceUuid Uuid(uint8_t seed) {
  DeviceUuid uuid;
  for (size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<uint8_t>(seed + i * 17);
  return uuid;
}

TEST(DeviceUuidTest, FormatsAsNvidiaSmiDoes) {
  DeviceUuid uuid{0x8f, 0x1e, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f,
                  0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7};
  EXPECT_EQ(FormatDeviceUuid(uuid), "GPU-8f1e2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7");
}

// The exporter's GPU is found by UUID whatever ordinal this process gives it: kvtierd's device 0
// is an engine's device 1 when the engine runs with CUDA_VISIBLE_DEVICES=1,0.
TEST(DeviceUuidTest, AnOrdinalIsFoundByUuidNotByPosition) {
  const std::vector<DeviceUuid> daemon = {Uuid(1), Uuid(2)};
  const std::vector<DeviceUuid> engine = {Uuid(2), Uuid(1)};
  EXPECT_EQ(OrdinalOfUuid(daemon[0], engine), 1);
  EXPECT_EQ(OrdinalOfUuid(daemon[1], engine), 0);
  // CUDA_VISIBLE_DEVICES=1 in the engine: the daemon's device 0 is not there at all.
  const std::vector<DeviceUuid> hidden = {Uuid(2)};
  EXPECT_EQ(OrdinalOfUuid(daemon[0], hidden), -1);
}

}  // namespace
}  // namespace kvtier::cuda

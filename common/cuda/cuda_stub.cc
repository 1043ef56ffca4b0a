// The build without CUDA (KVTIER_WITH_CUDA=OFF): nothing is ever pinned and there is no device.
// Only the parts of common/cuda that every build offers (pinned_host_range.h, probe.h) have stubs.
#include <utility>

#include "common/cuda/pinned_host_range.h"
#include "common/cuda/probe.h"

namespace kvtier::cuda {
namespace {

Status NoCuda() { return Rejected("built without CUDA (KVTIER_WITH_CUDA=OFF)"); }

}  // namespace

PinnedHostRange PinnedHostRange::Register(void* base, size_t bytes, const Options& options) {
  PinnedHostRange range;
  range.status_ = NoCuda();
  return range;
}

PinnedHostRange::~PinnedHostRange() = default;
PinnedHostRange::PinnedHostRange(PinnedHostRange&& other) noexcept
    : status_(std::exchange(other.status_, NoCuda())) {}
PinnedHostRange& PinnedHostRange::operator=(PinnedHostRange&& other) noexcept {
  status_ = std::exchange(other.status_, NoCuda());
  return *this;
}
void PinnedHostRange::Reset() {}

bool BuiltWithCuda() { return false; }

Status ProbeDevice(int device) { return NoCuda(); }

}  // namespace kvtier::cuda

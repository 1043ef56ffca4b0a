// The completion rules both I/O backends share: how one kernel result advances a request.
//
// Internal to tiers/nvme. A request may take several kernel calls: a short transfer resubmits the
// rest, EAGAIN/EINTR resubmit the same range, and every other outcome finishes the request with a
// Status. Keeping the rules in one place is what lets the io_uring and thread-pool backends pass the
// same tests. Not synchronised: one IoProgress belongs to one request of one batch.
#pragma once

#include <cstdint>
#include <string_view>

#include "tiers/nvme/io_backend.h"

namespace kvtier::tiers::nvme::internal {

struct IoProgress {
  uint64_t done = 0;  // bytes transferred so far
  int retries = 0;    // EAGAIN / EINTR / zero-byte writes seen
  bool finished = false;
};

// The next piece of `request` still to transfer.
inline std::byte* NextBuffer(const IoRequest& r, const IoProgress& p) { return r.buffer + p.done; }
inline uint64_t NextOffset(const IoRequest& r, const IoProgress& p) { return r.offset + p.done; }
inline uint64_t Remaining(const IoRequest& r, const IoProgress& p) { return r.length - p.done; }

// Applies one kernel result (bytes >= 0 or -errno) to `request`. Returns true when the request is
// finished (request.status is then set), false when the caller must submit the next piece again.
bool ApplyResult(IoRequest& request, IoProgress& progress, int64_t result, std::string_view engine);

// Runs `result` through the test filter, when there is one, keeping it within the rules of
// CompletionFilter.
int64_t FilterResult(CompletionFilter* filter, const IoRequest& request, int64_t result);

// fdatasync(fd), retried on EINTR; kDeviceError naming `engine` and the fd otherwise.
Status SyncFd(int fd, std::string_view engine);

}  // namespace kvtier::tiers::nvme::internal

// StreamCopy: memcpy for large blocks whose destination the copying thread will not read again.
//
// A block put into the host arena is read later by someone else (the daemon demoting it, another
// client getting it), never by the writer. A plain memcpy of a 2 MiB block first reads every
// destination cache line into the cache (read-for-ownership) and then evicts useful lines of the
// writer to hold bytes nobody on this core will touch. Non-temporal stores write around the cache:
// about half the memory traffic for the same copy. Small copies stay with memcpy, where the store
// fence and cache bypass cost more than they save.
//
// Thread safety: a pure function; the caller owns both ranges. The ranges must not overlap.
#pragma once

#include <cstddef>

namespace kvtier {

// Below this many bytes StreamCopy is plain memcpy.
inline constexpr size_t kStreamCopyMinBytes = size_t{256} << 10;

// Copies `bytes` from `src` to `dst` (any alignment). On return every byte is visible to other
// threads and processes as after memcpy (the non-temporal stores are fenced).
void StreamCopy(void* dst, const void* src, size_t bytes);

}  // namespace kvtier

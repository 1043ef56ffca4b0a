// Running out of memory on purpose, for tests of what an exception (std::bad_alloc) leaves behind.
//
// CapAddressSpace() caps the address space of the calling process a little above what it maps
// now, so that a larger allocation fails and operator new throws std::bad_alloc, as it would under
// real memory pressure, with no hook in the code under test. Call it in a death test's child
// (EXPECT_EXIT) only: the cap holds for the whole process, and an in-process daemon's threads in
// the parent must not meet it. The sanitizers reserve terabytes of shadow memory and abort rather
// than throw when an allocation fails, so kAddressSpaceCapWorks is false under them: skip then.
#pragma once

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>

namespace kvtier::client::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kAddressSpaceCapWorks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
inline constexpr bool kAddressSpaceCapWorks = false;
#else
inline constexpr bool kAddressSpaceCapWorks = true;
#endif
#else
inline constexpr bool kAddressSpaceCapWorks = true;
#endif

// Sets the soft RLIMIT_AS to the current mapping size plus `headroom_bytes`. False when the
// current size cannot be read or the limit set.
inline bool CapAddressSpace(size_t headroom_bytes) {
  // Allocations of 128 KiB or more then map fresh memory, which the cap counts, instead of reusing
  // heap that earlier tests freed but glibc kept mapped (which would not count).
  if (::mallopt(M_MMAP_THRESHOLD, 128 << 10) != 1) return false;
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  if (!(statm >> pages)) return false;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0) return false;
  limit.rlim_cur = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + headroom_bytes;
  return ::setrlimit(RLIMIT_AS, &limit) == 0;
}

}  // namespace kvtier::client::testing

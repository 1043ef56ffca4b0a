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
#include <sys/wait.h>
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

// Makes allocations of 128 KiB or more map memory of their own and give it back when freed. Call it
// at the start of the test, before its large allocations: glibc otherwise raises that threshold
// as large blocks are freed (up to 32 MiB) and keeps freed large blocks in its heap, already
// mapped, where a later allocation under the cap finds room the cap does not count (the test
// then passed by chance or failed by chance, about one run in ten).
// Earlier tests of the same process can still leave large free blocks in the heap: ctest runs each
// test in a process of its own, where none are left. (gtest's "threadsafe" death tests, which
// would start afresh, run the in-process daemon under the cap too, and its threads die of it.)
inline bool MapLargeAllocationsAlone() { return ::mallopt(M_MMAP_THRESHOLD, 128 << 10) == 1; }

// Sets the soft RLIMIT_AS to the current mapping size plus `headroom_bytes`. False when the
// current size cannot be read or the limit set.
inline bool CapAddressSpace(size_t headroom_bytes) {
  if (!MapLargeAllocationsAlone()) return false;
  ::malloc_trim(0);  // what the heap holds free at its top goes back too
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  if (!(statm >> pages)) return false;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0) return false;
  limit.rlim_cur = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + headroom_bytes;
  return ::setrlimit(RLIMIT_AS, &limit) == 0;
}

// Lifts the cap again (the soft limit back to the hard one), so that what follows the failure can
// be checked with memory to spare.
inline bool LiftAddressSpaceCap() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0) return false;
  limit.rlim_cur = limit.rlim_max;
  return ::setrlimit(RLIMIT_AS, &limit) == 0;
}

// A death test's verdict: exit 0 (checked), or kValueFitted, when the allocation meant to fail
// found room the cap does not count (memory the heap had already mapped; about one run in 200):
// then nothing was tested, and nothing was wrong.
inline constexpr int kValueFitted = 2;
inline bool CheckedOrFitted(int status) {
  return WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kValueFitted);
}

}  // namespace kvtier::client::testing

// Compiled with -mavx2 (hashing/CMakeLists.txt): xxHash's header picks its AVX2 accumulate loop.
// XXH_INLINE_ALL gives every xxHash function in this file internal linkage, so none of this
// AVX2 code can stand in for the library's functions elsewhere.
#include "hashing/payload_checksum_avx2.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static_assert(XXH_VECTOR == XXH_AVX2, "this file must be compiled with -mavx2");

namespace kvtier::hashing::detail {

uint64_t PayloadChecksumAvx2(const void* p, size_t n) { return XXH3_64bits(p, n); }

}  // namespace kvtier::hashing::detail

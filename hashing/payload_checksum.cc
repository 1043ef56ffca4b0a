#include "hashing/payload_checksum.h"

#include <xxhash.h>

#include "hashing/payload_checksum_avx2.h"

namespace kvtier::hashing {
namespace {

using ChecksumFn = uint64_t (*)(const void*, size_t);

uint64_t LibraryChecksum(const void* p, size_t n) { return XXH3_64bits(p, n); }

ChecksumFn Choose() {
#if KVTIER_PAYLOAD_CHECKSUM_AVX2
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return &detail::PayloadChecksumAvx2;
#endif
  return &LibraryChecksum;
}

// Chosen once, at the first call: the CPU does not change under a running process.
ChecksumFn Chosen() {
  static const ChecksumFn fn = Choose();
  return fn;
}

}  // namespace

uint64_t PayloadChecksum(std::span<const std::byte> bytes) {
  return Chosen()(bytes.data(), bytes.size());
}

std::string_view PayloadChecksumImplementation() {
  return Chosen() == &LibraryChecksum ? "library" : "avx2";
}

}  // namespace kvtier::hashing

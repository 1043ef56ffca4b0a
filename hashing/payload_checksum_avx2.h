// The AVX2 build of XXH3-64 behind PayloadChecksum (payload_checksum.h); only in x86-64 builds
// (KVTIER_PAYLOAD_CHECKSUM_AVX2), and only to be called on a CPU that has AVX2.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::hashing::detail {

uint64_t PayloadChecksumAvx2(const void* p, size_t n);

}  // namespace kvtier::hashing::detail

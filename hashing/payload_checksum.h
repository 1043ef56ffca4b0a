// PayloadChecksum: the XXH3-64 of a block's bytes that the NVMe and remote tiers store with every
// block and check on every read (docs/nvme-format.md). The same value on every machine, whichever
// implementation computes it.
//
// Why not simply XXH3_64bits from Debian's libxxhash: that library is built for the baseline
// x86-64 (SSE2) and has no run-time dispatch, and the checksum of every block the mover writes to
// or reads from NVMe is most of the mover's CPU time. On a CPU with AVX2 this calls the same
// XXH3 from xxHash's header, compiled for AVX2 (XXH_INLINE_ALL: internal linkage, so nothing of it
// mixes with the library's symbols): on AMD EPYC 1.2-1.3x the library's rate on 256 KiB blocks
// out of cache, as the mover's are (memory-bound; payload_checksum_ratio_to_library in
// bench/core_bench.cc), and about 2.4x on cached ones.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvtier::hashing {

uint64_t PayloadChecksum(std::span<const std::byte> bytes);

// "avx2" or "library": which implementation PayloadChecksum runs on this CPU.
std::string_view PayloadChecksumImplementation();

}  // namespace kvtier::hashing

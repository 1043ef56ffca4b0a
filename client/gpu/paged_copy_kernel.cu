#include <cstdint>

#include "client/gpu/paged_copy_kernel.h"

namespace kvtier::client::gpu {
namespace {

struct PlaneTable {
  unsigned char* bases[kKernelMaxPlanes];
};

constexpr unsigned kThreads = 256;
// Enough blocks per plane to fill the GPU for one 2 MiB block of 32-64 planes (H200: 132 SMs),
// few enough that small planes do not launch idle blocks.
constexpr unsigned kMaxBlocksPerPlane = 64;

template <typename Word>
__global__ void PagedCopyKernel(PlaneTable table, uint64_t block_offset_bytes,
                                uint64_t layer_block_bytes, unsigned char* contiguous,
                                bool gather) {
  const unsigned plane = blockIdx.y;
  Word* plane_words = reinterpret_cast<Word*>(table.bases[plane] + block_offset_bytes);
  Word* flat_words = reinterpret_cast<Word*>(contiguous + plane * layer_block_bytes);
  const uint64_t words = layer_block_bytes / sizeof(Word);
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  if (gather) {
    for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += step) {
      flat_words[i] = plane_words[i];
    }
  } else {
    for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += step) {
      plane_words[i] = flat_words[i];
    }
  }
}

bool Aligned16(uint64_t value) { return (value & 15) == 0; }

}  // namespace

cudaError_t LaunchPagedCopy(void* const* plane_bases, uint32_t planes, uint64_t block_offset_bytes,
                            uint64_t layer_block_bytes, void* contiguous, bool gather,
                            cudaStream_t stream) {
  if (planes == 0 || planes > kKernelMaxPlanes || layer_block_bytes == 0) {
    return cudaErrorInvalidValue;
  }
  PlaneTable table;
  bool wide = Aligned16(layer_block_bytes) && Aligned16(block_offset_bytes) &&
              Aligned16(reinterpret_cast<uintptr_t>(contiguous));
  for (uint32_t i = 0; i < planes; ++i) {
    table.bases[i] = static_cast<unsigned char*>(plane_bases[i]);
    wide = wide && Aligned16(reinterpret_cast<uintptr_t>(plane_bases[i]));
  }
  const uint64_t words = wide ? layer_block_bytes / 16 : layer_block_bytes;
  const uint64_t wanted = (words + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(wanted < kMaxBlocksPerPlane ? wanted : kMaxBlocksPerPlane),
                  planes);
  auto* flat = static_cast<unsigned char*>(contiguous);
  // A launch reports its error only through cudaGetLastError, which would also return an error
  // an earlier, unrelated call left behind (a refused cudaHostRegister): forget that one first.
  (void)cudaGetLastError();
  if (wide) {
    PagedCopyKernel<uint4>
        <<<grid, kThreads, 0, stream>>>(table, block_offset_bytes, layer_block_bytes, flat, gather);
  } else {
    PagedCopyKernel<unsigned char>
        <<<grid, kThreads, 0, stream>>>(table, block_offset_bytes, layer_block_bytes, flat, gather);
  }
  return cudaGetLastError();
}

}  // namespace kvtier::client::gpu

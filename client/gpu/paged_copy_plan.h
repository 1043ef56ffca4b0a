// What one launch of the paged gather/scatter kernel (paged_copy_kernel.cu) copies, and how each
// of its threads does it, in code that both nvcc (device and host, C++17) and the host compiler
// build: the kernel runs PagedCopyThread on the GPU, and the CPU tests run the very same function
// over every thread of a launch on host memory, so the kernel's arithmetic (the split of a segment
// between threads, the word width, the fallback for unaligned data) is tested without a GPU.
//
// A launch covers up to kKernelMaxBatch blocks ("entries") of one paged layout, all planes of
// each: grid x = slices of one segment, y = plane, z = entry. A segment is one block in one plane:
// layer_block_bytes between plane_bases[plane] + block_offsets[entry] and
// contiguous[entry] + plane * layer_block_bytes. Everything travels by value as the kernel's one
// parameter (under CUDA's 4 KiB parameter limit), so a launch needs no device-side table and no
// extra copy.
//
// Word widths: when every address and the length are multiples of 16 (any real KV layout: fp16 or
// bf16 heads of 64+ elements), threads move 16-byte words, then 8 and 4; otherwise (odd strides,
// a contiguous buffer at an odd offset) each segment writes whole aligned 4-byte words of its
// destination, built from two aligned source words with a funnel shift, plus at most three bytes
// at either end, so no launch moves data byte by byte. The fallback reads only aligned 4-byte
// words that hold at least one byte of the source, which never leaves the source's allocation
// (allocations are 4-byte granular and page-aligned on the GPU).
//
// Values and pure functions; any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__CUDACC__)
#define KVTIER_HOST_DEVICE __host__ __device__
#else
#define KVTIER_HOST_DEVICE
#endif

namespace kvtier::client::gpu {

// Planes of one layout: equal to kMaxPagedPlanes (paged_layout.h, C++20, which nvcc does not
// compile). 8 bytes each: 2 KiB of the parameter.
inline constexpr uint32_t kKernelMaxPlanes = 256;
// Blocks per launch: 16 bytes each, 1 KiB of the parameter. 64 blocks of a 16-token Llama-8B
// layout (64 planes) are 4096 segments, several waves of an H200, so a larger batch would not
// run faster, and a larger table would not fit in 4 KiB beside the planes.
inline constexpr uint32_t kKernelMaxBatch = 64;
inline constexpr uint32_t kKernelThreads = 256;
// Thread blocks one launch aims for (about four waves of 8 blocks on each of an H200's 132 SMs):
// segments get fewer slices each when there are many of them, so a batch does not launch
// thousands of blocks that each copy a few words.
inline constexpr uint64_t kKernelTargetThreadBlocks = 4096;
// Slices per segment at most, so that one huge segment does not get a grid of its own.
inline constexpr uint32_t kKernelMaxSlices = 64;

struct PagedCopyArgs {
  unsigned char* plane_bases[kKernelMaxPlanes];
  uint64_t block_offsets[kKernelMaxBatch];     // entry e's block: this offset in every plane
  unsigned char* contiguous[kKernelMaxBatch];  // entry e's contiguous side, device memory
  uint64_t layer_block_bytes;
  uint32_t planes;      // grid y
  uint32_t entries;     // grid z
  uint32_t slices;      // grid x
  uint32_t word_bytes;  // 16, 8 or 4: aligned words; 1: the shifted fallback
  bool gather;          // planes -> contiguous; the reverse otherwise
};
static_assert(sizeof(PagedCopyArgs) <= 4096, "a kernel parameter is at most 4 KiB");

// The widest word (16, 8, 4) that divides every address of the launch and the length; 1 when
// none does (the fallback). Reads args.plane_bases, block_offsets, contiguous, planes, entries
// and layer_block_bytes.
inline uint32_t ChooseWordBytes(const PagedCopyArgs& args) {
  uint64_t bits = args.layer_block_bytes;
  for (uint32_t p = 0; p < args.planes; ++p) {
    bits |= reinterpret_cast<uintptr_t>(args.plane_bases[p]);
  }
  for (uint32_t e = 0; e < args.entries; ++e) {
    bits |= args.block_offsets[e] | reinterpret_cast<uintptr_t>(args.contiguous[e]);
  }
  for (uint32_t width : {16u, 8u, 4u}) {
    if ((bits & (width - 1)) == 0) return width;
  }
  return 1;
}

// Thread blocks per segment (grid x): enough for one pass of one word per thread, fewer when the
// launch has many segments (kKernelTargetThreadBlocks), 1 to kKernelMaxSlices.
inline uint32_t PlanSlices(uint64_t layer_block_bytes, uint32_t word_bytes, uint64_t segments) {
  const uint64_t width = word_bytes < 4 ? 4 : word_bytes;  // the fallback's words are 4 bytes
  const uint64_t words = (layer_block_bytes + width - 1) / width;
  uint64_t slices = (words + kKernelThreads - 1) / kKernelThreads;
  const uint64_t budget = segments >= kKernelTargetThreadBlocks
                              ? 1
                              : kKernelTargetThreadBlocks / (segments == 0 ? 1 : segments);
  if (slices > budget) slices = budget;
  if (slices > kKernelMaxSlices) slices = kKernelMaxSlices;
  return static_cast<uint32_t>(slices == 0 ? 1 : slices);
}

namespace paged_copy_detail {

struct alignas(16) Word16 {
  uint64_t low, high;
};

// Loads and stores of words: plain accesses on the GPU, memcpy on the host (no aliasing
// questions for the CPU tests).
template <typename Word>
KVTIER_HOST_DEVICE inline Word Load(const unsigned char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const Word*>(p);
#else
  Word w;
  std::memcpy(&w, p, sizeof(Word));
  return w;
#endif
}

template <typename Word>
KVTIER_HOST_DEVICE inline void Store(unsigned char* p, Word w) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Word*>(p) = w;
#else
  std::memcpy(p, &w, sizeof(Word));
#endif
}

// Words `rank`, `rank + ranks`, ... of a segment whose ends and length are multiples of the
// word. Four loads are issued before their stores, so each thread keeps several reads in flight.
template <typename Word>
KVTIER_HOST_DEVICE inline void CopyWords(unsigned char* dst, const unsigned char* src,
                                         uint64_t bytes, uint64_t rank, uint64_t ranks) {
  constexpr uint64_t kUnroll = 4;
  const uint64_t words = bytes / sizeof(Word);
  uint64_t i = rank;
  for (; i + (kUnroll - 1) * ranks < words; i += kUnroll * ranks) {
    Word w[kUnroll];
    for (uint64_t u = 0; u < kUnroll; ++u) w[u] = Load<Word>(src + (i + u * ranks) * sizeof(Word));
    for (uint64_t u = 0; u < kUnroll; ++u) Store<Word>(dst + (i + u * ranks) * sizeof(Word), w[u]);
  }
  for (; i < words; i += ranks) {
    Store<Word>(dst + i * sizeof(Word), Load<Word>(src + i * sizeof(Word)));
  }
}

// The four bytes starting `shift` (1 to 3) bytes into `low`, followed by `high` (little endian).
KVTIER_HOST_DEVICE inline uint32_t FunnelShift(uint32_t low, uint32_t high, uint32_t shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(low, high, 8 * shift);
#else
  return (low >> (8 * shift)) | (high << (32 - 8 * shift));
#endif
}

// Any segment: bytes up to the destination's first 4-byte boundary, whole aligned 4-byte words
// of the destination, then what is left (each end under 4 bytes, one thread per byte).
KVTIER_HOST_DEVICE inline void CopyShifted(unsigned char* dst, const unsigned char* src,
                                           uint64_t bytes, uint64_t rank, uint64_t ranks) {
  uint64_t head = (4 - (reinterpret_cast<uintptr_t>(dst) & 3)) & 3;
  if (head > bytes) head = bytes;
  const uint64_t words = (bytes - head) / 4;
  const uint64_t tail = head + words * 4;
  if (rank < head) dst[rank] = src[rank];
  if (rank < bytes - tail) dst[tail + rank] = src[tail + rank];
  unsigned char* body_dst = dst + head;
  const unsigned char* body_src = src + head;
  const uint32_t shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(body_src) & 3);
  if (shift == 0) {
    CopyWords<uint32_t>(body_dst, body_src, words * 4, rank, ranks);
    return;
  }
  // Source word k + 1 holds the last byte of destination word k, so no read passes the
  // source's last aligned word.
  const unsigned char* aligned = body_src - shift;
  for (uint64_t k = rank; k < words; k += ranks) {
    const uint32_t low = Load<uint32_t>(aligned + 4 * k);
    const uint32_t high = Load<uint32_t>(aligned + 4 * k + 4);
    Store<uint32_t>(body_dst + 4 * k, FunnelShift(low, high, shift));
  }
}

}  // namespace paged_copy_detail

// Thread `thread` of slice `slice` of segment (plane, entry): its share of that segment.
KVTIER_HOST_DEVICE inline void PagedCopyThread(const PagedCopyArgs& args, uint32_t slice,
                                               uint32_t thread, uint32_t plane, uint32_t entry) {
  using namespace paged_copy_detail;
  unsigned char* in_plane = args.plane_bases[plane] + args.block_offsets[entry];
  unsigned char* flat = args.contiguous[entry] + plane * args.layer_block_bytes;
  unsigned char* dst = args.gather ? flat : in_plane;
  const unsigned char* src = args.gather ? in_plane : flat;
  const uint64_t rank = static_cast<uint64_t>(slice) * kKernelThreads + thread;
  const uint64_t ranks = static_cast<uint64_t>(args.slices) * kKernelThreads;
  switch (args.word_bytes) {
    case 16:
      CopyWords<Word16>(dst, src, args.layer_block_bytes, rank, ranks);
      break;
    case 8:
      CopyWords<uint64_t>(dst, src, args.layer_block_bytes, rank, ranks);
      break;
    case 4:
      CopyWords<uint32_t>(dst, src, args.layer_block_bytes, rank, ranks);
      break;
    default:
      CopyShifted(dst, src, args.layer_block_bytes, rank, ranks);
      break;
  }
}

}  // namespace kvtier::client::gpu

#include "common/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvtier {

void StreamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  // SSE2 is part of x86-64 itself, so no run-time dispatch is needed; wider vectors gain nothing
  // on a copy that is bound by memory bandwidth.
  if (bytes >= kStreamCopyMinBytes) {
    auto* d = static_cast<char*>(dst);
    auto* s = static_cast<const char*>(src);
    constexpr size_t kLine = 64;
    // Streaming stores need 16-byte aligned destinations; align to a whole cache line so each
    // line is written entirely by the streaming stores (a partial line would be read first).
    const size_t head = (kLine - (reinterpret_cast<uintptr_t>(d) & (kLine - 1))) & (kLine - 1);
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    const size_t body = bytes & ~(kLine - 1);
    for (size_t i = 0; i < body; i += kLine) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    // Non-temporal stores are weakly ordered: without the fence a later store (the commit that
    // publishes the block) could become visible before the block's bytes.
    _mm_sfence();
    std::memcpy(d + body, s + body, bytes - body);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace kvtier

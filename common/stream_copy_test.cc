#include "common/stream_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvtier {
namespace {

std::vector<char> Pattern(size_t bytes) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>(i * 131 + 7 + i / 251);
  return v;
}

// Every size class (below the threshold, at it, with a ragged tail) at every destination and
// source misalignment within a cache line; bytes just outside the destination stay untouched.
TEST(StreamCopyTest, CopiesExactlyTheBytesAtAnyAlignment) {
  const size_t sizes[] = {0, 1, 63, 4096, kStreamCopyMinBytes - 1, kStreamCopyMinBytes,
                          kStreamCopyMinBytes + 1, kStreamCopyMinBytes + 77, (2 << 20) + 13};
  for (size_t bytes : sizes) {
    const std::vector<char> src = Pattern(bytes + 128);
    for (size_t dst_off : {0, 1, 15, 16, 63}) {
      for (size_t src_off : {0, 3, 32}) {
        std::vector<char> dst(bytes + 128, '\x5a');
        StreamCopy(dst.data() + dst_off, src.data() + src_off, bytes);
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, bytes), 0)
            << bytes << " bytes, dst+" << dst_off << ", src+" << src_off;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], '\x5a');
        for (size_t i = dst_off + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], '\x5a');
      }
    }
  }
}

}  // namespace
}  // namespace kvtier

#include "hashing/block_hasher.h"

// The stack-allocated streaming state (XXH3_state_t's definition) is behind this macro. The header
// and the shared library come from the same package, so the layout matches.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace kvtier::hashing {
namespace {

constexpr size_t kParentBytes = 16;
constexpr size_t kRecordHeaderBytes = 5;  // tag byte + u32 LE length

// Encodings up to this size are built in a stack buffer and hashed with one XXH3_128bits() call,
// the fastest path for short inputs (a 16-token block encodes to 90 bytes); larger ones stream
// through an XXH3 state on the stack. Both give the same digest. 2 KiB holds a 256-token block
// (LMCache's default chunk) with room for extras.
constexpr size_t kOneShotBytes = 2048;

// Encoding buffers of ChainKeysInto(): block i + kRing - 1 is written while block i is hashed.
// One block ahead is enough; deeper rings measured no faster and cost stack.
constexpr size_t kRing = 2;

// Tokens converted per round when streaming on a big-endian host.
constexpr size_t kSwapChunkTokens = 256;

// The stores below are whole-word stores on purpose: the hash reads the buffer back in 8-byte
// words soon after, and a word assembled from single-byte stores cannot be forwarded from the
// store buffer, which stalls the load until the stores commit.
inline uint32_t ToLe32(uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) return v;
  return __builtin_bswap32(v);
}

inline void StoreU32Le(uint32_t v, std::byte* out) {
  const uint32_t le = ToLe32(v);
  std::memcpy(out, &le, 4);
}

inline uint64_t ToBe64(uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap64(v);
  return v;
}

// Same bytes as Key128::ToBytes(), kept here so the per-block path stays inlinable. Takes the
// halves as scalars: see ChainKeysInto() for why the chain keeps its key out of a Key128.
inline void StoreKeyBe(uint64_t high, uint64_t low, std::byte* out) {
  const uint64_t high_be = ToBe64(high);
  const uint64_t low_be = ToBe64(low);
  std::memcpy(out, &high_be, 8);
  std::memcpy(out + 8, &low_be, 8);
}

inline std::byte* WriteRecordHeader(uint8_t tag, size_t length, std::byte* out) {
  out[0] = static_cast<std::byte>(tag);
  StoreU32Le(static_cast<uint32_t>(length), out + 1);
  return out + kRecordHeaderBytes;
}

inline std::byte* WriteTokensLe(std::span<const uint32_t> tokens, std::byte* out) {
  if constexpr (std::endian::native == std::endian::little) {
    // Fixed 16-byte copies compile to single vector moves; a memcpy of a run-time size is a libc
    // call whose wide stores the hash's 8-byte loads then straddle (measured ~15% slower chain).
    const auto* src = reinterpret_cast<const std::byte*>(tokens.data());
    const size_t bytes = tokens.size_bytes();
    size_t i = 0;
    // 64 bytes a round (16 tokens) keeps the loop's own instructions off the per-block count.
    for (; i + 64 <= bytes; i += 64) std::memcpy(out + i, src + i, 64);
    for (; i + 16 <= bytes; i += 16) std::memcpy(out + i, src + i, 16);
    for (; i < bytes; i += 4) std::memcpy(out + i, src + i, 4);
    return out + bytes;
  } else {
    for (uint32_t t : tokens) {
      StoreU32Le(t, out);
      out += 4;
    }
    return out;
  }
}

inline BlockKey ToBlockKey(XXH128_hash_t h) {
  BlockKey key;
  key.high = h.high64;
  key.low = h.low64;
  return key;
}

void UpdateTokens(XXH3_state_t* state, std::span<const uint32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    XXH3_128bits_update(state, tokens.data(), tokens.size_bytes());
  } else {
    std::byte chunk[kSwapChunkTokens * 4];
    while (!tokens.empty()) {
      const auto part = tokens.first(std::min(tokens.size(), kSwapChunkTokens));
      XXH3_128bits_update(state, chunk, WriteTokensLe(part, chunk) - chunk);
      tokens = tokens.subspan(part.size());
    }
  }
}

// The streaming form of ChainKey() for encodings larger than kOneShotBytes.
BlockKey StreamChainKey(const Key128& parent, std::span<const uint32_t> block_tokens,
                        std::span<const std::byte> extra) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  std::byte head[kParentBytes + kRecordHeaderBytes];
  StoreKeyBe(parent.high, parent.low, head);
  WriteRecordHeader(kTokensTag, block_tokens.size(), head + kParentBytes);
  XXH3_128bits_update(&state, head, sizeof(head));
  UpdateTokens(&state, block_tokens);
  std::byte extra_header[kRecordHeaderBytes];
  WriteRecordHeader(kExtraTag, extra.size(), extra_header);
  XXH3_128bits_update(&state, extra_header, sizeof(extra_header));
  XXH3_128bits_update(&state, extra.data(), extra.size());
  return ToBlockKey(XXH3_128bits_digest(&state));
}

inline size_t EncodedSize(std::span<const uint32_t> block_tokens,
                          std::span<const std::byte> extra) {
  return kParentBytes + 2 * kRecordHeaderBytes + block_tokens.size_bytes() + extra.size();
}

// Writes everything of a token block's encoding but the parent: bytes [16, EncodedSize()) of buf.
inline void WriteBody(std::span<const uint32_t> block_tokens, std::span<const std::byte> extra,
                      std::byte* buf) {
  std::byte* p = WriteRecordHeader(kTokensTag, block_tokens.size(), buf + kParentBytes);
  p = WriteTokensLe(block_tokens, p);
  p = WriteRecordHeader(kExtraTag, extra.size(), p);
  if (!extra.empty()) std::memcpy(p, extra.data(), extra.size());
}

// Checks the size rule of ChainKeysInto()'s block_extras.
Status CheckExtras(size_t num_tokens, uint32_t tokens_per_block, size_t num_extras) {
  if (num_extras == 0) return Status::Ok();
  const size_t full = num_tokens / tokens_per_block;
  const size_t all = full + (num_tokens % tokens_per_block != 0 ? 1 : 0);
  if (num_extras == full || num_extras == all) return Status::Ok();
  // None, one per full block, or one per block with the partial last one: each count said once
  // (they coincide when the tokens fill whole blocks, or less than one).
  std::vector<size_t> counts = {0};
  for (const size_t count : {full, all}) {
    if (count != counts.back()) counts.push_back(count);
  }
  std::string expected;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) expected += i + 1 == counts.size() ? " or " : ", ";
    expected += std::to_string(counts[i]);
  }
  return InvalidArgument("block_extras: expected " + expected + " entries for " +
                         std::to_string(num_tokens) + " tokens, got " + std::to_string(num_extras));
}

}  // namespace

size_t NumFullBlocks(size_t num_tokens, uint32_t tokens_per_block) {
  return tokens_per_block == 0 ? 0 : num_tokens / tokens_per_block;
}

BlockKey ChainKey(const Key128& parent, std::span<const uint32_t> block_tokens,
                  std::span<const std::byte> extra) {
  const size_t size = EncodedSize(block_tokens, extra);
  if (size > kOneShotBytes) return StreamChainKey(parent, block_tokens, extra);
  std::byte buf[kOneShotBytes];
  StoreKeyBe(parent.high, parent.low, buf);
  WriteBody(block_tokens, extra, buf);
  return ToBlockKey(XXH3_128bits(buf, size));
}

// ChainKeysInto() for blocks without extras whose encoding fits kOneShotBytes: every block then
// has the same size and the same framing, so both buffers get their framing once and each block
// only copies its tokens. Per 16-token block this is about a third of the instructions spent
// beside the hash by the general loop below, which rebuilt and re-measured each block's framing.
void ChainPlainKeys(const NamespaceId& ns, std::span<const uint32_t> tokens,
                    uint32_t tokens_per_block, std::span<BlockKey> out) {
  alignas(64) std::byte bufs[kRing][kOneShotBytes];
  const auto block_at = [&](size_t i) {
    return tokens.subspan(i * tokens_per_block, tokens_per_block);
  };
  const size_t size = EncodedSize(block_at(0), {});
  for (auto& buf : bufs) WriteBody(block_at(0), {}, buf);
  const auto copy_tokens = [&](size_t i) {
    WriteTokensLe(block_at(i), bufs[i % kRing] + kParentBytes + kRecordHeaderBytes);
  };
  for (size_t i = 0; i < kRing - 1 && i < out.size(); ++i) copy_tokens(i);
  uint64_t high = ns.high;
  uint64_t low = ns.low;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i + kRing - 1 < out.size()) copy_tokens(i + kRing - 1);
    std::byte* buf = bufs[i % kRing];
    StoreKeyBe(high, low, buf);
    const XXH128_hash_t h = XXH3_128bits(buf, size);
    high = h.high64;
    low = h.low64;
    out[i].high = high;
    out[i].low = low;
  }
}

// The chain is serial (each block's bytes include the previous key), so the time per block is the
// latency of one short hash, and everything that does not need the parent is done a block ahead:
// block i+1's body is written while block i is hashed. Written just before its own hash, the body
// would be read back by the hash's 8-byte loads straddling several fresh stores, which the store
// buffer cannot forward, and every block would wait for those stores to commit (measured: 1.6x
// the time per 16-token block). This way only the parent, two 8-byte stores each read back by one
// 8-byte load, sits on the chain.
Result<size_t> ChainKeysInto(const NamespaceId& ns, std::span<const uint32_t> tokens,
                             uint32_t tokens_per_block, std::span<BlockKey> out,
                             ByteSpans block_extras) {
  if (tokens_per_block == 0) return InvalidArgument("tokens_per_block: must be at least 1");
  KVTIER_RETURN_IF_ERROR(CheckExtras(tokens.size(), tokens_per_block, block_extras.size()));
  const size_t n = std::min(NumFullBlocks(tokens.size(), tokens_per_block), out.size());
  if (n == 0) return n;
  if (block_extras.empty() && EncodedSize(tokens.first(tokens_per_block), {}) <= kOneShotBytes) {
    ChainPlainKeys(ns, tokens, tokens_per_block, out.first(n));
    return n;
  }
  auto block_at = [&](size_t i) { return tokens.subspan(i * tokens_per_block, tokens_per_block); };
  auto extra_at = [&](size_t i) {
    return block_extras.empty() ? std::span<const std::byte>() : block_extras[i];
  };
  alignas(64) std::byte bufs[kRing][kOneShotBytes];
  size_t sizes[kRing];
  auto prepare = [&](size_t i) {
    const size_t slot = i % kRing;
    sizes[slot] = EncodedSize(block_at(i), extra_at(i));
    if (sizes[slot] <= kOneShotBytes) WriteBody(block_at(i), extra_at(i), bufs[slot]);
  };
  for (size_t i = 0; i < kRing - 1 && i < n; ++i) prepare(i);
  // The running key is two scalars, not a Key128: copying XXH128_hash_t {low64, high64} into a
  // {high, low} struct made the compiler bounce it through the stack as two 8-byte stores read
  // back by one 16-byte load, a store-forwarding stall on every link of the chain.
  uint64_t high = ns.high;
  uint64_t low = ns.low;
  for (size_t i = 0; i < n; ++i) {
    if (i + kRing - 1 < n) prepare(i + kRing - 1);
    const size_t slot = i % kRing;
    if (sizes[slot] <= kOneShotBytes) {
      StoreKeyBe(high, low, bufs[slot]);
      const XXH128_hash_t h = XXH3_128bits(bufs[slot], sizes[slot]);
      high = h.high64;
      low = h.low64;
    } else {
      const BlockKey k = StreamChainKey(Key128{high, low}, block_at(i), extra_at(i));
      high = k.high;
      low = k.low;
    }
    out[i].high = high;
    out[i].low = low;
  }
  return n;
}

Result<std::vector<BlockKey>> ChainKeys(const NamespaceId& ns, std::span<const uint32_t> tokens,
                                        uint32_t tokens_per_block, ByteSpans block_extras) {
  std::vector<BlockKey> keys(NumFullBlocks(tokens.size(), tokens_per_block));
  KVTIER_ASSIGN_OR_RETURN(const size_t n,
                          ChainKeysInto(ns, tokens, tokens_per_block, keys, block_extras));
  keys.resize(n);
  return keys;
}

BlockKey FoldForeignKey(const Key128& parent, std::span<const std::byte> engine_hash_bytes) {
  const size_t size = kParentBytes + kRecordHeaderBytes + engine_hash_bytes.size();
  std::byte head[kParentBytes + kRecordHeaderBytes];
  StoreKeyBe(parent.high, parent.low, head);
  WriteRecordHeader(kForeignTag, engine_hash_bytes.size(), head + kParentBytes);
  if (size <= kOneShotBytes) {
    std::byte buf[kOneShotBytes];
    std::memcpy(buf, head, sizeof(head));
    if (!engine_hash_bytes.empty()) {
      std::memcpy(buf + sizeof(head), engine_hash_bytes.data(), engine_hash_bytes.size());
    }
    return ToBlockKey(XXH3_128bits(buf, size));
  }
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, head, sizeof(head));
  XXH3_128bits_update(&state, engine_hash_bytes.data(), engine_hash_bytes.size());
  return ToBlockKey(XXH3_128bits_digest(&state));
}

std::vector<BlockKey> FoldForeignKeys(const NamespaceId& ns, ByteSpans engine_hashes) {
  std::vector<BlockKey> keys;
  keys.reserve(engine_hashes.size());
  Key128 parent = ns;
  for (const auto& bytes : engine_hashes) {
    keys.push_back(FoldForeignKey(parent, bytes));
    parent = keys.back();
  }
  return keys;
}

std::vector<BlockKey> FoldForeignKeys(const NamespaceId& ns,
                                      std::span<const std::string> engine_hashes) {
  std::vector<BlockKey> keys;
  keys.reserve(engine_hashes.size());
  Key128 parent = ns;
  for (const std::string& s : engine_hashes) {
    keys.push_back(FoldForeignKey(parent, std::as_bytes(std::span<const char>(s))));
    parent = keys.back();
  }
  return keys;
}

}  // namespace kvtier::hashing

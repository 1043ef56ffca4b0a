#include "hashing/block_hasher.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace kvtier::hashing {
namespace {

const NamespaceId kNsA = [] {
  NamespaceId id;
  id.high = 0x1111111111111111ULL;
  id.low = 0x2222222222222222ULL;
  return id;
}();
const NamespaceId kNsB = [] {
  NamespaceId id;
  id.high = 0x1111111111111111ULL;
  id.low = 0x2222222222222223ULL;
  return id;
}();

std::vector<uint32_t> Tokens(size_t n, uint32_t seed = 7) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i * 2654435761u + seed);
  return t;
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s));
}

TEST(BlockHasherTest, OnlyFullBlocksGetKeys) {
  EXPECT_EQ(ChainKeys(kNsA, Tokens(47), 16)->size(), 2u);
  EXPECT_EQ(ChainKeys(kNsA, Tokens(48), 16)->size(), 3u);
  EXPECT_EQ(ChainKeys(kNsA, Tokens(15), 16)->size(), 0u);
  EXPECT_EQ(ChainKeys(kNsA, {}, 16)->size(), 0u);
  EXPECT_EQ(NumFullBlocks(47, 16), 2u);
  EXPECT_EQ(NumFullBlocks(47, 0), 0u);
  // The partial block's tokens do not influence the full blocks' keys.
  std::vector<uint32_t> a = Tokens(40);
  std::vector<uint32_t> b = a;
  b[39] ^= 1;
  EXPECT_EQ(ChainKeys(kNsA, a, 16).value(), ChainKeys(kNsA, b, 16).value());
}

TEST(BlockHasherTest, ZeroTokensPerBlockIsRejected) {
  const auto keys = ChainKeys(kNsA, Tokens(32), 0);
  EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument);
  std::array<BlockKey, 2> out;
  EXPECT_EQ(ChainKeysInto(kNsA, Tokens(32), 0, out).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockHasherTest, FirstParentIsTheNamespaceAndKeysChain) {
  const std::vector<uint32_t> t = Tokens(48);
  const std::vector<BlockKey> keys = ChainKeys(kNsA, t, 16).value();
  const std::span<const uint32_t> s(t);
  EXPECT_EQ(keys[0], ChainKey(kNsA, s.subspan(0, 16)));
  EXPECT_EQ(keys[1], ChainKey(keys[0], s.subspan(16, 16)));
  EXPECT_EQ(keys[2], ChainKey(keys[1], s.subspan(32, 16)));
}

TEST(BlockHasherTest, SameTokensUnderTwoNamespacesDiffer) {
  const std::vector<uint32_t> t = Tokens(64);
  const std::vector<BlockKey> a = ChainKeys(kNsA, t, 16).value();
  const std::vector<BlockKey> b = ChainKeys(kNsB, t, 16).value();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << i;
}

TEST(BlockHasherTest, ChangingAnEarlierTokenChangesEveryLaterKey) {
  const std::vector<uint32_t> t = Tokens(16 * 6);
  const std::vector<BlockKey> base = ChainKeys(kNsA, t, 16).value();
  for (size_t pos : {size_t{0}, size_t{15}, size_t{17}, size_t{40}, size_t{95}}) {
    std::vector<uint32_t> changed = t;
    changed[pos] += 1;
    const std::vector<BlockKey> keys = ChainKeys(kNsA, changed, 16).value();
    const size_t block = pos / 16;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i < block) {
        EXPECT_EQ(keys[i], base[i]) << "pos " << pos << " block " << i;
      } else {
        EXPECT_NE(keys[i], base[i]) << "pos " << pos << " block " << i;
      }
    }
  }
}

TEST(BlockHasherTest, ShorterPrefixGivesLeadingKeys) {
  const std::vector<uint32_t> t = Tokens(16 * 5 + 3);
  const std::vector<BlockKey> all = ChainKeys(kNsA, t, 16).value();
  const std::vector<BlockKey> prefix =
      ChainKeys(kNsA, std::span<const uint32_t>(t).first(16 * 3), 16).value();
  EXPECT_EQ(prefix, std::vector<BlockKey>(all.begin(), all.begin() + 3));
  // A short output span computes the same leading keys.
  std::array<BlockKey, 2> out;
  EXPECT_EQ(ChainKeysInto(kNsA, t, 16, out).value(), 2u);
  EXPECT_EQ(out[0], all[0]);
  EXPECT_EQ(out[1], all[1]);
}

TEST(BlockHasherTest, EmptyExtraIsNoExtraAndAnyExtraDiffers) {
  const std::vector<uint32_t> t = Tokens(16);
  const BlockKey plain = ChainKey(kNsA, t);
  EXPECT_EQ(plain, ChainKey(kNsA, t, {}));
  const std::string lora = "lora:7";
  const std::string lora2 = "lora:8";
  const std::string nul(1, '\0');
  std::set<Key128> keys = {plain, ChainKey(kNsA, t, AsBytes(lora)),
                           ChainKey(kNsA, t, AsBytes(lora2)), ChainKey(kNsA, t, AsBytes(nul))};
  EXPECT_EQ(keys.size(), 4u);
}

TEST(BlockHasherTest, PerBlockExtrasApplyToTheirBlock) {
  const std::vector<uint32_t> t = Tokens(40);  // two full blocks, a partial third
  const std::string e0 = "img:abc";
  const std::string e1;
  const std::string e2 = "ignored";
  const std::vector<std::span<const std::byte>> extras = {AsBytes(e0), AsBytes(e1)};
  const std::vector<BlockKey> keys = ChainKeys(kNsA, t, 16, extras).value();
  const std::span<const uint32_t> s(t);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], ChainKey(kNsA, s.first(16), AsBytes(e0)));
  EXPECT_EQ(keys[1], ChainKey(keys[0], s.subspan(16, 16)));
  // One entry for the partial block too is accepted and ignored.
  const std::vector<std::span<const std::byte>> with_partial = {AsBytes(e0), AsBytes(e1),
                                                                AsBytes(e2)};
  EXPECT_EQ(ChainKeys(kNsA, t, 16, with_partial).value(), keys);
  // Any other count is a caller error.
  const std::vector<std::span<const std::byte>> one = {AsBytes(e0)};
  const Status refused = ChainKeys(kNsA, t, 16, one).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("expected 0, 2 or 3 entries for 40 tokens, got 1"),
            std::string::npos)
      << refused.ToString();
  // Whole blocks only: one count besides 0, said once.
  const std::vector<uint32_t> whole = Tokens(32);
  const Status once = ChainKeys(kNsA, whole, 16, one).status();
  EXPECT_NE(once.message().find("expected 0 or 2 entries for 32 tokens, got 1"), std::string::npos)
      << once.ToString();
  // Fewer tokens than a block: none, or one for the partial block.
  const std::vector<std::span<const std::byte>> two = {AsBytes(e0), AsBytes(e1)};
  const Status partial = ChainKeys(kNsA, Tokens(5), 16, two).status();
  EXPECT_NE(partial.message().find("expected 0 or 1 entries for 5 tokens, got 2"),
            std::string::npos)
      << partial.ToString();
}

TEST(BlockHasherTest, MixedOneShotAndStreamedBlocksChainTheSame) {
  // The middle block's 3000-byte extra is too large for the stack buffer and is streamed.
  const std::vector<uint32_t> t = Tokens(48);
  const std::string small = "a";
  const std::string big(3000, 'b');
  const std::vector<std::span<const std::byte>> extras = {AsBytes(small), AsBytes(big), {}};
  const std::vector<BlockKey> keys = ChainKeys(kNsA, t, 16, extras).value();
  const std::span<const uint32_t> s(t);
  ASSERT_EQ(keys.size(), 3u);
  const BlockKey k0 = ChainKey(kNsA, s.first(16), AsBytes(small));
  const BlockKey k1 = ChainKey(k0, s.subspan(16, 16), AsBytes(big));
  EXPECT_EQ(keys[0], k0);
  EXPECT_EQ(keys[1], k1);
  EXPECT_EQ(keys[2], ChainKey(k1, s.subspan(32, 16)));
  // Blocks too large for the stack buffer chain the same way as small ones.
  const std::vector<uint32_t> big_blocks = Tokens(3 * 1024);
  const std::span<const uint32_t> b(big_blocks);
  const std::vector<BlockKey> big_keys = ChainKeys(kNsA, big_blocks, 1024).value();
  ASSERT_EQ(big_keys.size(), 3u);
  EXPECT_EQ(big_keys[0], ChainKey(kNsA, b.first(1024)));
  EXPECT_EQ(big_keys[2], ChainKey(big_keys[1], b.subspan(2048, 1024)));
}

TEST(BlockHasherTest, OddBlockSizesCopyEveryToken) {
  // Sizes that are not a multiple of four tokens exercise the copy's tail.
  for (uint32_t tpb : {1u, 3u, 5u, 7u, 17u}) {
    const std::vector<uint32_t> t = Tokens(tpb * 3);
    const std::vector<BlockKey> keys = ChainKeys(kNsA, t, tpb).value();
    std::vector<uint32_t> changed = t;
    changed[tpb - 1] += 1;  // the last token of the first block
    EXPECT_NE(ChainKeys(kNsA, changed, tpb).value()[0], keys[0]) << tpb;
    EXPECT_EQ(keys[1], ChainKey(keys[0], std::span<const uint32_t>(t).subspan(tpb, tpb))) << tpb;
  }
}

TEST(BlockHasherTest, TokensAreNotShiftableBetweenBlockSizes) {
  // 32 tokens as two 16-token blocks vs one 32-token block: different encodings, different keys.
  const std::vector<uint32_t> t = Tokens(32);
  const std::vector<BlockKey> sixteen = ChainKeys(kNsA, t, 16).value();
  const std::vector<BlockKey> thirty_two = ChainKeys(kNsA, t, 32).value();
  EXPECT_NE(sixteen[1], thirty_two[0]);
  EXPECT_NE(sixteen[0], thirty_two[0]);
}

TEST(BlockHasherTest, ForeignKeysChainAndNeverMatchTokenKeys) {
  const std::string h0(32, 'a');
  const std::string h1(32, 'b');
  const std::vector<std::string> hashes = {h0, h1};
  const std::vector<BlockKey> keys = FoldForeignKeys(kNsA, hashes);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], FoldForeignKey(kNsA, AsBytes(h0)));
  EXPECT_EQ(keys[1], FoldForeignKey(keys[0], AsBytes(h1)));
  // The span-of-spans form agrees with the string form.
  const std::vector<std::span<const std::byte>> spans = {AsBytes(h0), AsBytes(h1)};
  EXPECT_EQ(FoldForeignKeys(kNsA, spans), keys);
  // Order matters: a chain, not a set.
  EXPECT_NE(FoldForeignKeys(kNsA, std::vector<std::string>{h1, h0})[1], keys[1]);
  // Namespaces separate foreign keys too.
  EXPECT_NE(FoldForeignKeys(kNsB, hashes)[0], keys[0]);
  // 8 bytes that read as two little-endian u32 tokens still fold to a different key.
  const std::vector<uint32_t> two = {0x64636261u, 0x68676665u};
  const std::string as_bytes = "abcdefgh";
  EXPECT_NE(FoldForeignKey(kNsA, AsBytes(as_bytes)), ChainKey(kNsA, two));
  EXPECT_TRUE(FoldForeignKeys(kNsA, std::vector<std::string>{}).empty());
}

}  // namespace
}  // namespace kvtier::hashing

#include "client/kvtier_c.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/testing/address_space_cap.h"
#include "client/testing/in_process_daemon.h"
#include "common/types.h"
#include "hashing/block_hasher.h"

namespace {

using kvtier::client::testing::InProcessDaemon;

kvtier_namespace_desc Desc() {
  kvtier_namespace_desc d{};
  d.model_id = "c-abi";
  d.kv_dtype = "fp16";
  d.num_layers = 1;
  d.num_kv_heads = 1;
  d.head_dim = 8;
  d.tokens_per_block = 2;
  d.layout_tag = "test";
  return d;
}

TEST(KvtierCTest, ErrorsWithoutAServer) {
  kvtier_client* client = reinterpret_cast<kvtier_client*>(0x1);
  EXPECT_EQ(kvtier_connect("ftp://x", nullptr, -1, &client), KVTIER_EINVAL);
  EXPECT_EQ(client, nullptr);
  EXPECT_NE(std::string(kvtier_last_error()).find("'ftp://x'"), std::string::npos);
  EXPECT_EQ(kvtier_connect("unix:///nonexistent/kvtierd.sock", nullptr, 100, &client),
            KVTIER_ENOTFOUND);
  EXPECT_NE(std::string(kvtier_last_error()).find("nonexistent"), std::string::npos);
  EXPECT_EQ(kvtier_connect("unix:///x", nullptr, 0, nullptr), KVTIER_EINVAL);

  kvtier_key ns{};
  size_t prefix = 0;
  EXPECT_EQ(kvtier_lookup(nullptr, &ns, nullptr, 0, &prefix, nullptr), KVTIER_EINVAL);
  EXPECT_EQ(kvtier_attach(nullptr), KVTIER_EINVAL);
  EXPECT_EQ(kvtier_put(nullptr, &ns, nullptr, 0, nullptr, 0, nullptr, nullptr), KVTIER_EINVAL);
  EXPECT_EQ(kvtier_get(nullptr, &ns, nullptr, 0, nullptr, 0, &prefix), KVTIER_EINVAL);
  EXPECT_EQ(kvtier_register_namespace(nullptr, nullptr, 0, &ns, nullptr), KVTIER_EINVAL);
  kvtier_close(nullptr);
}

TEST(KvtierCTest, HashTokensMatchesTheHashingLibrary) {
  kvtier_key ns;
  for (int i = 0; i < 16; ++i) ns.bytes[i] = static_cast<uint8_t>(i);
  const uint32_t tokens[] = {1, 2, 3, 4, 5, 6, 7};
  kvtier_key keys[8];
  size_t n = 0;
  ASSERT_EQ(kvtier_hash_tokens(&ns, tokens, 7, 2, keys, 8, &n), KVTIER_OK);
  EXPECT_EQ(n, 3u);
  const kvtier::NamespaceId id{kvtier::Key128::FromBytes(reinterpret_cast<std::byte*>(ns.bytes))};
  const auto expected = kvtier::hashing::ChainKeys(id, tokens, 2);
  ASSERT_TRUE(expected.ok());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(kvtier::Key128::FromBytes(reinterpret_cast<std::byte*>(keys[i].bytes)),
              static_cast<const kvtier::Key128&>((*expected)[i]));
  }
  // A short output computes the leading keys only.
  ASSERT_EQ(kvtier_hash_tokens(&ns, tokens, 7, 2, keys, 1, &n), KVTIER_OK);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(kvtier_hash_tokens(&ns, tokens, 7, 0, keys, 8, &n), KVTIER_EINVAL);
}

// A client of `server` (attached to its arena when `attach`) with Desc() registered: the start of
// most tests below. Fails the test (and leaves *client null) when a step fails.
struct Session {
  kvtier_client* client = nullptr;
  kvtier_key ns{};
  uint64_t block_bytes = 0;
};
void OpenSession(const InProcessDaemon& server, bool attach, Session* session) {
  ASSERT_EQ(kvtier_connect(server.url().c_str(), nullptr, 5000, &session->client), KVTIER_OK)
      << kvtier_last_error();
  if (attach) {
    ASSERT_EQ(kvtier_attach(session->client), KVTIER_OK) << kvtier_last_error();
  }
  const kvtier_namespace_desc desc = Desc();
  ASSERT_EQ(
      kvtier_register_namespace(session->client, &desc, 0, &session->ns, &session->block_bytes),
      KVTIER_OK)
      << kvtier_last_error();
}

void RoundTrip(bool attach) {
  InProcessDaemon server;
  Session session;
  ASSERT_NO_FATAL_FAILURE(OpenSession(server, attach, &session));
  const auto& [client, ns, block_bytes] = session;
  const kvtier_namespace_desc desc = Desc();
  EXPECT_EQ(block_bytes, 2u * 1 * 1 * 8 * 2 * 2);  // K and V, fp16

  const uint32_t tokens[] = {10, 11, 12, 13, 14, 15};
  kvtier_key keys[3];
  size_t n = 0;
  ASSERT_EQ(kvtier_hash_tokens(&ns, tokens, 6, desc.tokens_per_block, keys, 3, &n), KVTIER_OK);
  std::vector<std::vector<uint8_t>> blocks(3, std::vector<uint8_t>(block_bytes));
  for (size_t i = 0; i < 3; ++i)
    std::memset(blocks[i].data(), 'a' + static_cast<int>(i), block_bytes);
  const void* src[] = {blocks[0].data(), blocks[1].data()};
  int statuses[2];
  size_t stored = 0;
  ASSERT_EQ(kvtier_put(client, &ns, keys, 2, src, block_bytes, statuses, &stored), KVTIER_OK)
      << kvtier_last_error();
  EXPECT_EQ(statuses[0], KVTIER_OK);
  EXPECT_EQ(stored, 2u);
  ASSERT_EQ(kvtier_put(client, &ns, keys, 1, src, block_bytes, statuses, &stored), KVTIER_OK);
  EXPECT_EQ(statuses[0], KVTIER_EEXISTS);

  size_t prefix = 0;
  uint8_t tiers[3] = {9, 9, 9};
  ASSERT_EQ(kvtier_lookup(client, &ns, keys, 3, &prefix, tiers), KVTIER_OK);
  EXPECT_EQ(prefix, 2u);
  EXPECT_EQ(tiers[0], KVTIER_TIER_HOST);
  prefix = 0;
  ASSERT_EQ(kvtier_refresh(client, &ns, keys, 3, &prefix), KVTIER_OK) << kvtier_last_error();
  EXPECT_EQ(prefix, 2u);
  EXPECT_EQ(kvtier_refresh(client, &ns, nullptr, 1, &prefix), KVTIER_EINVAL);

  std::vector<std::vector<uint8_t>> out(3, std::vector<uint8_t>(block_bytes));
  void* dst[] = {out[0].data(), out[1].data(), out[2].data()};
  size_t served = 0;
  ASSERT_EQ(kvtier_get(client, &ns, keys, 3, dst, block_bytes, &served), KVTIER_OK)
      << kvtier_last_error();
  EXPECT_EQ(served, 2u);
  EXPECT_EQ(out[0], blocks[0]);
  EXPECT_EQ(out[1], blocks[1]);
  // A wrong block size surfaces as an error code, not an exception or a crash.
  EXPECT_EQ(kvtier_get(client, &ns, keys, 1, dst, block_bytes - 1, &served), KVTIER_EINVAL);
  kvtier_close(client);
}

TEST(KvtierCTest, InlineRoundTrip) { RoundTrip(false); }
TEST(KvtierCTest, SharedMemoryRoundTrip) { RoundTrip(true); }

// A NULL entry in the block array is a bad argument found before anything is sent: not a fault
// in the copy through shared memory, nor a failed write that loses the connection.
void NullBlockPointerIsInvalid(bool attach) {
  InProcessDaemon server;
  Session session;
  ASSERT_NO_FATAL_FAILURE(OpenSession(server, attach, &session));
  const auto& [client, ns, block_bytes] = session;
  const kvtier_namespace_desc desc = Desc();
  const uint32_t tokens[] = {1, 2, 3, 4};
  kvtier_key keys[2];
  size_t n = 0;
  ASSERT_EQ(kvtier_hash_tokens(&ns, tokens, 4, desc.tokens_per_block, keys, 2, &n), KVTIER_OK);
  std::vector<uint8_t> block(block_bytes, 'x');

  const void* src[] = {nullptr, block.data()};
  size_t stored = 7;
  EXPECT_EQ(kvtier_put(client, &ns, keys, 2, src, block_bytes, nullptr, &stored), KVTIER_EINVAL);
  EXPECT_NE(std::string(kvtier_last_error()).find("blocks[0]"), std::string::npos)
      << kvtier_last_error();
  EXPECT_EQ(stored, 7u);  // nothing said: nothing was stored
  const void* good[] = {block.data(), block.data()};
  ASSERT_EQ(kvtier_put(client, &ns, keys, 2, good, block_bytes, nullptr, &stored), KVTIER_OK)
      << kvtier_last_error();
  EXPECT_EQ(stored, 2u);

  std::vector<uint8_t> out(block_bytes);
  void* dst[] = {out.data(), nullptr};
  size_t served = 0;
  EXPECT_EQ(kvtier_get(client, &ns, keys, 2, dst, block_bytes, &served), KVTIER_EINVAL);
  EXPECT_NE(std::string(kvtier_last_error()).find("blocks[1]"), std::string::npos)
      << kvtier_last_error();
  // The handle is still usable.
  ASSERT_EQ(kvtier_get(client, &ns, keys, 1, dst, block_bytes, &served), KVTIER_OK)
      << kvtier_last_error();
  EXPECT_EQ(served, 1u);
  EXPECT_EQ(out, block);
  kvtier_close(client);
}

TEST(KvtierCTest, NullBlockPointerIsInvalidInline) { NullBlockPointerIsInvalid(false); }
TEST(KvtierCTest, NullBlockPointerIsInvalidAttached) { NullBlockPointerIsInvalid(true); }

// A lookup may report the fleet's remote tier (code 3) besides gpu, host and nvme; the header
// names every code kvtier_lookup can write.
TEST(KvtierCTest, LookupReportsTheRemoteTier) {
  EXPECT_EQ(KVTIER_TIER_GPU, static_cast<int>(kvtier::TierId::kGpu));
  EXPECT_EQ(KVTIER_TIER_HOST, static_cast<int>(kvtier::TierId::kHost));
  EXPECT_EQ(KVTIER_TIER_NVME, static_cast<int>(kvtier::TierId::kNvme));
  EXPECT_EQ(KVTIER_TIER_REMOTE, static_cast<int>(kvtier::TierId::kRemote));
  InProcessDaemon server;
  kvtier_client* client = nullptr;
  ASSERT_EQ(kvtier_connect(server.url().c_str(), nullptr, 5000, &client), KVTIER_OK)
      << kvtier_last_error();
  // What a daemon in a cluster answers for a block here and one another node published.
  server.faults().SetRawReply("KVT.LOOKUP", "*2\r\n:2\r\n$2\r\n13\r\n");
  kvtier_key ns{};
  kvtier_key keys[2] = {};
  keys[1].bytes[0] = 1;
  size_t prefix = 0;
  uint8_t tiers[2] = {9, 9};
  ASSERT_EQ(kvtier_lookup(client, &ns, keys, 2, &prefix, tiers), KVTIER_OK) << kvtier_last_error();
  EXPECT_EQ(prefix, 2u);
  EXPECT_EQ(tiers[0], KVTIER_TIER_HOST);
  EXPECT_EQ(tiers[1], KVTIER_TIER_REMOTE);
  kvtier_close(client);
}

// A get that fails after serving leased blocks (the inline read of the rest answered -BUSY)
// reports the blocks served; one that serves nothing fails with *served_out set to 0.
TEST(KvtierCTest, AGetThatFailsPartWayReportsWhatItServed) {
  InProcessDaemon server(InProcessDaemon::Options{.gpu_pool_bytes = uint64_t{1} << 20});
  Session session;
  ASSERT_NO_FATAL_FAILURE(OpenSession(server, /*attach=*/true, &session));
  const auto& [client, ns, block_bytes] = session;
  const kvtier_namespace_desc desc = Desc();
  const uint32_t tokens[] = {1, 2, 3, 4};
  kvtier_key keys[2];
  size_t n = 0;
  ASSERT_EQ(kvtier_hash_tokens(&ns, tokens, 4, desc.tokens_per_block, keys, 2, &n), KVTIER_OK);
  std::vector<std::vector<uint8_t>> blocks = {std::vector<uint8_t>(block_bytes, 'a'),
                                              std::vector<uint8_t>(block_bytes, 'b')};
  const void* src[] = {blocks[0].data()};
  ASSERT_EQ(kvtier_put(client, &ns, keys, 1, src, block_bytes, nullptr, nullptr), KVTIER_OK);
  // The second block lies outside the arena: a get leases the first and reads it inline.
  const auto as_key = [](const kvtier_key& k) {
    return kvtier::BlockKey{kvtier::Key128::FromBytes(reinterpret_cast<const std::byte*>(k.bytes))};
  };
  ASSERT_TRUE(server
                  .PlaceOutsideArena(kvtier::NamespaceId{as_key(ns)}, as_key(keys[1]),
                                     std::as_bytes(std::span(blocks[1])))
                  .ok());

  std::vector<std::vector<uint8_t>> out(2, std::vector<uint8_t>(block_bytes));
  void* dst[] = {out[0].data(), out[1].data()};
  size_t served = 7;
  server.faults().SetRawReply("KVT.GET", "-BUSY too many open leases\r\n");
  ASSERT_EQ(kvtier_get(client, &ns, keys, 2, dst, block_bytes, &served), KVTIER_OK)
      << kvtier_last_error();
  EXPECT_EQ(served, 1u);
  EXPECT_EQ(out[0], blocks[0]);

  served = 7;
  server.faults().SetRawReply("KVT.GET", "-BUSY too many open leases\r\n");
  EXPECT_EQ(kvtier_get(client, &ns, keys + 1, 1, dst + 1, block_bytes, &served), KVTIER_EBUSY);
  EXPECT_EQ(served, 0u);
  kvtier_close(client);
}

// Out of memory in the middle of a get (a child process whose memory is capped reads a 32 MiB
// block): KVTIER_EINTERNAL, not a crash, and the handle's later calls fail instead of reading the
// rest of that reply as theirs.
TEST(KvtierCTest, OutOfMemoryIsAnErrorAndGivesTheConnectionUp) {
  if (!kvtier::client::testing::kAddressSpaceCapWorks) {
    GTEST_SKIP() << "no address-space cap under sanitizers";
  }
  ASSERT_TRUE(kvtier::client::testing::MapLargeAllocationsAlone());
  InProcessDaemon server(InProcessDaemon::Options{.arena_bytes = uint64_t{64} << 20});
  kvtier_client* client = nullptr;
  ASSERT_EQ(kvtier_connect(server.url().c_str(), nullptr, 5000, &client), KVTIER_OK)
      << kvtier_last_error();
  const kvtier_namespace_desc desc = Desc();
  kvtier_key ns;
  const uint64_t block_bytes = uint64_t{32} << 20;
  ASSERT_EQ(kvtier_register_namespace(client, &desc, block_bytes, &ns, nullptr), KVTIER_OK)
      << kvtier_last_error();
  const uint32_t tokens[] = {1, 2};
  kvtier_key key;
  size_t n = 0;
  ASSERT_EQ(kvtier_hash_tokens(&ns, tokens, 2, desc.tokens_per_block, &key, 1, &n), KVTIER_OK);
  std::vector<uint8_t> block(block_bytes, 'b');
  const void* src[] = {block.data()};
  size_t stored = 0;
  ASSERT_EQ(kvtier_put(client, &ns, &key, 1, src, block_bytes, nullptr, &stored), KVTIER_OK)
      << kvtier_last_error();
  ASSERT_EQ(stored, 1u);
  void* dst[] = {block.data()};  // allocated before the cap
  EXPECT_EXIT(
      {
        if (!kvtier::client::testing::CapAddressSpace(size_t{16} << 20)) std::_Exit(1);
        size_t served = 0;
        int outcome = 0;
        const int first = kvtier_get(client, &ns, &key, 1, dst, block_bytes, &served);
        if (first == KVTIER_OK) {
          outcome = kvtier::client::testing::kValueFitted;
        } else if (first != KVTIER_EINTERNAL) {
          outcome = 5;  // another failure than the one asked for
        } else if (std::string(kvtier_last_error()).find("memory") == std::string::npos) {
          outcome = 3;
        } else if (!kvtier::client::testing::LiftAddressSpaceCap()) {
          outcome = 1;
        } else {
          // Given up (the allocation failed inside the round trip), or still in step (it failed
          // after, on the value's way out): then the next get is answered as its own.
          const int again = kvtier_get(client, &ns, &key, 1, dst, block_bytes, &served);
          const bool given_up =
              again == KVTIER_EINTERNAL &&
              std::string(kvtier_last_error()).find("unusable") != std::string::npos;
          const bool in_step = again == KVTIER_OK && served == 1;
          if (!given_up && !in_step) outcome = 4;
        }
        std::_Exit(outcome);
      },
      kvtier::client::testing::CheckedOrFitted, "");
  kvtier_close(client);
}

TEST(KvtierCTest, AttachOverTcpIsRefused) {
  InProcessDaemon server(
      InProcessDaemon::Options{.tcp = true, .password = "", .arena_bytes = 1 << 20});
  kvtier_client* client = nullptr;
  ASSERT_EQ(kvtier_connect(server.url().c_str(), "", -1, &client), KVTIER_OK);
  EXPECT_EQ(kvtier_attach(client), KVTIER_EINVAL);
  EXPECT_NE(std::string(kvtier_last_error()).find("unix://"), std::string::npos);
  kvtier_close(client);
}

}  // namespace

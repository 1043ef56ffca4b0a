// Reads of blocks left on NVMe (nvme.promote_on_hit off) are made on the disk-read threads, never
// on a network thread: a client whose read waits for the disk does not stall the others of its
// thread (DiskReads, AppendLeasedBulk).
#include "daemon/server/disk_reads.h"

#include <gtest/gtest.h>

#include "daemon/server/generic_keyspace.h"
#include "daemon/server/test_client.h"
#include "hashing/namespace_descriptor.h"
#include "tests/fakes/fake_tier.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::PackKeys;
using testing::TestClient;
using testing::TestKey;
using testing::TestServer;
using testing::WaitFor;

constexpr size_t kBlockBytes = 64;

class DiskReadsTest : public ::testing::Test {
 protected:
  // A server whose commands wait up to mover_wait_ms for a read from disk, with every client on
  // the one network thread that a read made there would stall.
  void Start(uint64_t mover_wait_ms = 60'000) {
    ServerOptions options;
    options.io_threads = 1;
    options.mover_wait_ms = mover_wait_ms;
    store::StoreOptions store_options;
    store_options.promote_on_read = false;  // reads leave the block on NVMe and read it there
    auto nvme = std::make_unique<kvtier::testing::FakeTier>(TierId::kNvme, 1 << 20,
                                                             /*addressable=*/false);
    nvme_ = nvme.get();
    ts_ = std::make_unique<TestServer>(options, store_options, std::move(nvme));
    ASSERT_TRUE(ts_->status().ok()) << ts_->status().ToString();
    c_ = ts_->ConnectUnix();
    ASSERT_EQ(c_.Call({"KVT.REGISTER", "model", "m", "dtype", "fp16", "layers", "2", "kv_heads",
                       "1", "head_dim", "4", "block_tokens", "2", "layout", "nhd"})
                  .substr(0, 4),
              "*4\r\n");
    hashing::NamespaceDescriptor d;
    d.model_id = "m";
    d.kv_dtype = "fp16";
    d.num_layers = 2;
    d.num_kv_heads = 1;
    d.head_dim = 4;
    d.tokens_per_block = 2;
    d.layout_tag = "nhd";
    ns_ = *hashing::ComputeNamespaceId(d);
  }
  static std::string Payload(char c) { return std::string(kBlockBytes, c); }
  // Puts block `n` on the NVMe tier, as a demotion would have.
  void PlaceOnNvme(uint64_t n, char c) {
    const std::string bytes = Payload(c);
    ASSERT_TRUE(ts_->PlaceBlock(TierId::kNvme, ns_, TestKey(n),
                                std::as_bytes(std::span(bytes.data(), bytes.size())))
                    .ok());
  }
  std::string Get(std::initializer_list<uint64_t> keys) {
    std::vector<BlockKey> k;
    for (uint64_t n : keys) k.push_back(TestKey(n));
    return testing::Resp({"KVT.GET", ns_.ToHex(), PackKeys(k)});
  }
  uint64_t Leases() { return ts_->store().Stats().leases_active; }

  kvtier::testing::FakeTier* nvme_ = nullptr;
  std::unique_ptr<TestServer> ts_;
  TestClient c_;
  NamespaceId ns_;
};

TEST_F(DiskReadsTest, AClientWaitingForTheDiskDoesNotStallTheOthersOfItsThread) {
  Start();
  PlaceOnNvme(0, 'n');
  nvme_->HoldReads(true);
  ASSERT_TRUE(c_.Send(Get({0})));
  ASSERT_TRUE(WaitFor([&] { return nvme_->reads_started() == 1; }));
  TestClient other = ts_->ConnectUnix();
  EXPECT_EQ(other.Call({"PING"}), "+PONG\r\n");  // answered while the read waits for the disk
  EXPECT_EQ(c_.ReadReply(std::chrono::milliseconds(50)), "") << "answered before the read";
  nvme_->HoldReads(false);
  EXPECT_EQ(c_.ReadReply(), "*1\r\n" + Bulk(Payload('n')));
  EXPECT_TRUE(WaitFor([&] { return Leases() == 0; }));
  EXPECT_EQ(nvme_->Stats().block_count, 1u) << "the block stays on NVMe";
}

TEST_F(DiskReadsTest, AReadOfSeveralNvmeBlocksServesThemInOrder) {
  Start();
  PlaceOnNvme(0, 'a');
  PlaceOnNvme(1, 'b');
  PlaceOnNvme(2, 'c');
  c_.Send(Get({0, 1, 2}));
  EXPECT_EQ(c_.ReadReply(), "*3\r\n" + Bulk(Payload('a')) + Bulk(Payload('b')) + Bulk(Payload('c')));
  EXPECT_EQ(Leases(), 0u);
}

TEST_F(DiskReadsTest, AGenericValueOnNvmeIsReadOffTheNetworkThreadToo) {
  Start();
  const NamespaceId generic = GenericNamespaceId();
  const std::string block = std::string(1, static_cast<char>(kGenericValueFormat)) + "on disk";
  ASSERT_TRUE(ts_->PlaceBlock(TierId::kNvme, generic, GenericKey(generic, "k"),
                              std::as_bytes(std::span(block.data(), block.size())))
                  .ok());
  nvme_->HoldReads(true);
  ASSERT_TRUE(c_.Send(testing::Resp({"MGET", "k", "absent"})));
  ASSERT_TRUE(WaitFor([&] { return nvme_->reads_started() == 1; }));
  TestClient other = ts_->ConnectUnix();
  EXPECT_EQ(other.Call({"PING"}), "+PONG\r\n");
  nvme_->HoldReads(false);
  EXPECT_EQ(c_.ReadReply(), "*2\r\n" + Bulk("on disk") + "$-1\r\n");
  EXPECT_EQ(c_.Call({"GET", "k"}), Bulk("on disk"));
  EXPECT_TRUE(WaitFor([&] { return Leases() == 0; }));
}

TEST_F(DiskReadsTest, AReadThatOutlastsTheWaitIsAMissAndItsLeaseEndsWithTheRead) {
  Start(/*mover_wait_ms=*/50);
  PlaceOnNvme(0, 'n');
  nvme_->HoldReads(true);
  c_.Send(Get({0}));
  EXPECT_EQ(c_.ReadReply(), "*1\r\n$-1\r\n");
  EXPECT_EQ(Leases(), 1u) << "released while the read may still write into its buffer";
  nvme_->HoldReads(false);
  EXPECT_TRUE(WaitFor([&] { return Leases() == 0; }));
  c_.Send(Get({0}));  // and the block is still there to be read
  EXPECT_EQ(c_.ReadReply(), "*1\r\n" + Bulk(Payload('n')));
}

}  // namespace
}  // namespace kvtier::server

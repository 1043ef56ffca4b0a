// The shared-memory path against the daemon's server in-process, which passes its arena's memfd
// with SCM_RIGHTS.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/testing/in_process_daemon.h"

namespace kvtier::client {
namespace {

using testing::InProcessDaemon;

constexpr size_t kBlockBytes = 4096;

std::vector<std::byte> Payload(size_t index) {
  std::vector<std::byte> p(kBlockBytes);
  for (size_t i = 0; i < kBlockBytes; ++i) p[i] = static_cast<std::byte>((index * 29 + i) & 0xff);
  return p;
}

class ClientShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<Client> client = Client::Connect(server_.url());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::make_unique<Client>(std::move(client).value());
    hashing::NamespaceDescriptor d;
    d.model_id = "shm";
    d.kv_dtype = "int8";
    d.num_layers = d.num_kv_heads = d.head_dim = 1;
    d.tokens_per_block = 16;
    d.layout_tag = "test";
    Result<NamespaceInfo> ns = client_->RegisterNamespace(d, kBlockBytes);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = ns->id;
    Result<ArenaInfo> arena = client_->Attach();
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    EXPECT_EQ(arena->arena_bytes, InProcessDaemon::Options{}.arena_bytes);
    EXPECT_EQ(arena->tier, "host");
    ASSERT_TRUE(client_->attached());
    for (size_t i = 0; i < 4; ++i) {
      keys_.push_back(BlockKey{{i + 100, i}});
      payloads_.push_back(Payload(i));
    }
  }

  Result<std::vector<Status>> PutFirst(size_t n) {
    std::vector<const void*> ptrs;
    for (size_t i = 0; i < n; ++i) ptrs.push_back(payloads_[i].data());
    return client_->Put(ns_, std::span(keys_).first(n), ptrs, kBlockBytes);
  }

  // A small GPU tier above the arena holds the blocks an attached client cannot lease.
  InProcessDaemon server_{InProcessDaemon::Options{.gpu_pool_bytes = uint64_t{1} << 20}};
  std::unique_ptr<Client> client_;
  NamespaceId ns_;
  std::vector<BlockKey> keys_;
  std::vector<std::vector<std::byte>> payloads_;
};

TEST_F(ClientShmTest, PutThenGetThroughTheArena) {
  Result<std::vector<Status>> put = PutFirst(3);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(server_.block_count(), 3u);

  // The daemon sees the bytes the client wrote into the shared mapping.
  Result<std::vector<std::string>> inline_copy = client_->GetInline(ns_, std::span(keys_).first(1));
  ASSERT_TRUE(inline_copy.ok());
  EXPECT_EQ(0, std::memcmp((*inline_copy)[0].data(), payloads_[0].data(), kBlockBytes));

  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kBlockBytes));
  std::vector<void*> dst;
  for (auto& o : out) dst.push_back(o.data());
  Result<size_t> served = client_->Get(ns_, keys_, dst, kBlockBytes);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 3u);  // key 3 was never put: the prefix stops there
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[i], payloads_[i]) << i;
  // The leases were released; the key ACQUIRE missed was then asked inline, in case it lives
  // outside the arena.
  const std::vector<std::string> seen = server_.commands();
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[seen.size() - 3], "KVT.ACQUIRE");
  EXPECT_EQ(seen[seen.size() - 2], "KVT.RELEASE");
  EXPECT_EQ(seen.back(), "KVT.GET");

  Result<std::vector<Status>> again = PutFirst(1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].code(), StatusCode::kAlreadyExists);
}

// A descriptor that came with an earlier reply (a raw KVT.GPUATTACH sent through Command) must
// not be taken for the arena's: Attach maps the one sent with its own reply.
TEST_F(ClientShmTest, AttachMapsTheDescriptorOfItsOwnReply) {
  ASSERT_TRUE(client_->Command({"KVT.GPUATTACH"}).ok());
  Result<ArenaInfo> again = client_->Attach();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(PutFirst(2).ok());
  std::vector<std::byte> out(kBlockBytes);
  std::vector<void*> dst = {out.data()};
  Result<size_t> got = client_->Get(ns_, std::span(keys_).subspan(1, 1), dst, kBlockBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 1u);
  EXPECT_EQ(out, payloads_[1]);
}

// A grant that parses but breaks the protocol (an id that is not an integer): what the daemon
// granted is unknown, so the connection is given up (the daemon then ends every grant).
TEST_F(ClientShmTest, AMalformedGrantMakesTheClientUnusable) {
  ASSERT_TRUE(PutFirst(1).ok());
  server_.faults().SetRawReply("KVT.ACQUIRE", "*1\r\n*4\r\n+OK\r\n+x\r\n:0\r\n:4096\r\n");
  std::vector<std::byte> out(kBlockBytes);
  std::vector<void*> dst = {out.data()};
  Result<size_t> got = client_->Get(ns_, std::span(keys_).first(1), dst, kBlockBytes);
  EXPECT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
  EXPECT_FALSE(client_->usable());
}

// The same for the replies to the other commands that leave state with the daemon: a commit, a
// release, a lookup that holds. Regression: they left the connection in use, and the daemon's
// reservations, leases and holds were kept until their timeouts.
TEST_F(ClientShmTest, AMalformedReplyToACommitMakesTheClientUnusable) {
  server_.faults().SetRawReply("KVT.COMMIT", "*1\r\n:5\r\n");  // a number for a status word
  Result<std::vector<Status>> put = PutFirst(1);
  EXPECT_EQ(put.status().code(), StatusCode::kInternal) << put.status().ToString();
  EXPECT_FALSE(client_->usable());
}

TEST_F(ClientShmTest, AMalformedReplyToAReleaseMakesTheClientUnusable) {
  ASSERT_TRUE(PutFirst(1).ok());
  server_.faults().SetRawReply("KVT.RELEASE", "*1\r\n:5\r\n");
  std::vector<std::byte> out(kBlockBytes);
  std::vector<void*> dst = {out.data()};
  Result<size_t> got = client_->Get(ns_, std::span(keys_).first(1), dst, kBlockBytes);
  EXPECT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
  EXPECT_FALSE(client_->usable());
}

TEST_F(ClientShmTest, AMalformedReplyToAHoldingLookupMakesTheClientUnusable) {
  const std::span<const BlockKey> chain = std::span(keys_).first(1);
  const std::string longer_than_asked = "*2\r\n:9\r\n$0\r\n\r\n";
  server_.faults().SetRawReply("KVT.LOOKUP", longer_than_asked);
  Result<std::vector<LookupResult>> plain = client_->LookupMany(ns_, {&chain, 1});
  EXPECT_EQ(plain.status().code(), StatusCode::kInternal) << plain.status().ToString();
  EXPECT_TRUE(client_->usable());  // a plain lookup left nothing with the daemon
  server_.faults().SetRawReply("KVT.LOOKUP", longer_than_asked);
  Result<std::vector<LookupResult>> held =
      client_->LookupMany(ns_, {&chain, 1}, std::chrono::seconds(1));
  EXPECT_EQ(held.status().code(), StatusCode::kInternal) << held.status().ToString();
  EXPECT_FALSE(client_->usable());
}

// Copies out of the arena or out of staging memory that always fail, as a device copy can.
class FailingCopier final : public SlotCopier {
 public:
  Status Start(size_t, std::span<std::byte>) override { return DeviceError("copy engine fault"); }
  Status Wait() override { return Status::Ok(); }
};

// Blocks the arena does not hold come inline into staging memory and are then copied: a copy
// that fails there is the call's error when nothing was served, as for leased blocks.
TEST_F(ClientShmTest, AFailedCopyOfInlineBlocksIsTheErrorNotAMiss) {
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(server_.PlaceOutsideArena(ns_, keys_[i], payloads_[i]).ok());
  }
  FailingCopier copier;
  Result<size_t> got = client_->GetWith(ns_, std::span(keys_).first(2), kBlockBytes, copier);
  EXPECT_EQ(got.status().code(), StatusCode::kDeviceError) << got.status().ToString();
  EXPECT_TRUE(client_->usable());
}

// Copies each block into a host buffer, as a device copier would into device memory.
class HostCopier final : public SlotCopier {
 public:
  explicit HostCopier(std::vector<std::vector<std::byte>>& out) : out_(out) {}
  Status Start(size_t index, std::span<std::byte> slot) override {
    std::memcpy(out_[index].data(), slot.data(), slot.size());
    return Status::Ok();
  }
  Status Wait() override { return Status::Ok(); }

 private:
  std::vector<std::vector<std::byte>>& out_;
};

// The leased block is copied, then the inline read of the next one fails (the daemon at its
// lease limit answers -BUSY): the call returns the block served, which is in the caller's
// buffer, not the error. With nothing served, the error is the call's.
TEST_F(ClientShmTest, AFailureAfterBlocksWereServedReturnsTheirCount) {
  ASSERT_TRUE(PutFirst(1).ok());
  ASSERT_TRUE(server_.PlaceOutsideArena(ns_, keys_[1], payloads_[1]).ok());
  const std::span<const BlockKey> keys = std::span(keys_).first(2);
  const std::string busy = "-BUSY too many open leases\r\n";
  std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(kBlockBytes));
  const std::vector<void*> dst = {out[0].data(), out[1].data()};
  server_.faults().SetRawReply("KVT.GET", busy);
  Result<size_t> served = client_->Get(ns_, keys, dst, kBlockBytes);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 1u);
  EXPECT_EQ(out[0], payloads_[0]);

  std::vector<std::vector<std::byte>> copied(2, std::vector<std::byte>(kBlockBytes));
  HostCopier copier(copied);
  server_.faults().SetRawReply("KVT.GET", busy);
  served = client_->GetWith(ns_, keys, kBlockBytes, copier);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 1u);
  EXPECT_EQ(copied[0], payloads_[0]);

  server_.faults().SetRawReply("KVT.GET", busy);
  served = client_->Get(ns_, keys.subspan(1), std::span(dst).subspan(1), kBlockBytes);
  EXPECT_EQ(served.status().code(), StatusCode::kBusy) << served.status().ToString();
  EXPECT_TRUE(client_->usable());
}

TEST_F(ClientShmTest, BlocksOutsideTheArenaAreFetchedInline) {
  ASSERT_TRUE(PutFirst(1).ok());
  // Blocks 1..3 lie outside the arena (as on NVMe): ACQUIRE answers NOTFOUND for them.
  for (size_t i = 1; i < 4; ++i) {
    ASSERT_TRUE(server_.PlaceOutsideArena(ns_, keys_[i], payloads_[i]).ok());
  }
  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kBlockBytes));
  std::vector<void*> dst;
  for (auto& o : out) dst.push_back(o.data());
  const uint64_t trips = client_->counters().round_trips;
  Result<size_t> served = client_->Get(ns_, keys_, dst, kBlockBytes);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i], payloads_[i]) << i;
  EXPECT_EQ(client_->counters().round_trips, trips + 3);  // acquire, release, get
}

// A get longer than one command with a miss in its first: the KVT.ACQUIRE past the miss is not
// sent, so the present block there is not leased only to be released unread.
TEST_F(ClientShmTest, AGetPastAMissLeasesNothing) {
  ASSERT_TRUE(PutFirst(1).ok());
  std::vector<BlockKey> many(kMaxKeysPerCommand + 10, keys_[1]);
  many.front() = keys_[0];
  many.back() = keys_[0];  // present, but past the miss
  std::vector<std::byte> out(kBlockBytes);
  const std::vector<void*> dst(many.size(), out.data());  // only the first is written
  const auto count = [&](std::string_view name) {
    const std::vector<std::string> names = server_.commands();
    return std::count(names.begin(), names.end(), name);
  };
  const auto acquires = count("KVT.ACQUIRE");
  Result<size_t> served = client_->Get(ns_, many, dst, kBlockBytes);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 1u);
  EXPECT_EQ(out, payloads_[0]);
  EXPECT_EQ(count("KVT.ACQUIRE"), acquires + 1);
}

TEST_F(ClientShmTest, AFullyLeasedGetTakesTwoRoundTrips) {
  ASSERT_TRUE(PutFirst(2).ok());
  std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(kBlockBytes));
  std::vector<void*> dst = {out[0].data(), out[1].data()};
  const uint64_t trips = client_->counters().round_trips;
  ASSERT_EQ(*client_->Get(ns_, std::span(keys_).first(2), dst, kBlockBytes), 2u);
  EXPECT_EQ(client_->counters().round_trips, trips + 2);
}

TEST_F(ClientShmTest, AReleaseAnsweringNotFoundMakesTheCopyAMiss) {
  ASSERT_TRUE(PutFirst(3).ok());
  server_.ExpireLeasesBeforeRelease();
  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(kBlockBytes));
  std::vector<void*> dst;
  for (auto& o : out) dst.push_back(o.data());
  Result<size_t> served = client_->Get(ns_, std::span(keys_).first(3), dst, kBlockBytes);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, 0u);
  EXPECT_EQ(client_->counters().torn_reads, 3u);
}

TEST_F(ClientShmTest, AReservationThatExpiredBeforeCommitIsATimeout) {
  server_.ExpireReservationsBeforeCommit();
  Result<std::vector<Status>> put = PutFirst(2);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*put)[0].code(), StatusCode::kTimeout);
  EXPECT_EQ((*put)[1].code(), StatusCode::kTimeout);
  EXPECT_EQ(server_.block_count(), 0u);
}

TEST_F(ClientShmTest, ScatterGatherBlocks) {
  const std::vector<std::byte>& whole = payloads_[0];
  const ConstSegment in[] = {{whole.data(), 100}, {whole.data() + 100, kBlockBytes - 100}};
  const ConstBlock blocks[] = {ConstBlock(in)};
  Result<std::vector<Status>> put = client_->Put(ns_, std::span(keys_).first(1), blocks);
  ASSERT_TRUE(put.ok());
  ASSERT_TRUE((*put)[0].ok());
  std::vector<std::byte> a(kBlockBytes / 2), b(kBlockBytes / 2);
  const MutableSegment out[] = {{a.data(), a.size()}, {b.data(), b.size()}};
  const MutableBlock out_blocks[] = {MutableBlock(out)};
  Result<size_t> served = client_->Get(ns_, std::span(keys_).first(1), out_blocks);
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(*served, 1u);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(a, whole);
}

TEST_F(ClientShmTest, SizeMistakesAreInvalidArguments) {
  ASSERT_TRUE(PutFirst(1).ok());
  std::vector<std::byte> small(10);
  void* dst[] = {small.data()};
  EXPECT_EQ(client_->Get(ns_, std::span(keys_).first(1), dst, small.size()).status().code(),
            StatusCode::kInvalidArgument);
  // The lease was released all the same.
  EXPECT_EQ(server_.commands().back(), "KVT.RELEASE");
  EXPECT_EQ(client_->counters().torn_reads, 0u);
  const ConstSegment s1[] = {{payloads_[1].data(), kBlockBytes}};
  const ConstSegment s2[] = {{payloads_[2].data(), kBlockBytes - 1}};
  const ConstBlock mixed[] = {ConstBlock(s1), ConstBlock(s2)};
  EXPECT_EQ(client_->Put(ns_, std::span(keys_).subspan(1, 2), mixed).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ClientShmTest, BusyReservationsAreReportedPerKey) {
  // Fill the host tier with reservations (nothing to evict), then ask for more.
  const size_t capacity_blocks = InProcessDaemon::Options{}.arena_bytes / kBlockBytes;
  std::vector<BlockKey> keys;
  std::vector<const void*> ptrs;
  for (size_t i = 0; i < capacity_blocks + 2; ++i) {
    keys.push_back(BlockKey{{i, 999}});
    ptrs.push_back(payloads_[0].data());
  }
  Result<std::vector<Status>> put = client_->Put(ns_, keys, ptrs, kBlockBytes);
  ASSERT_TRUE(put.ok());
  EXPECT_TRUE((*put)[capacity_blocks - 1].ok());
  EXPECT_EQ((*put)[capacity_blocks].code(), StatusCode::kBusy);
  EXPECT_EQ((*put)[capacity_blocks + 1].code(), StatusCode::kBusy);
}

}  // namespace
}  // namespace kvtier::client

// The GPU pool shared with clients on the node: KVT.GPUATTACH hands out the pool (the fake pool's
// memfd here; a CUDA IPC handle on a GPU machine), after which KVT.ACQUIRE leases GPU blocks too,
// with the tier in each grant; a connection that did not attach sees what it always did, and a
// client that vanishes leaves no GPU lease behind.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "daemon/server/test_client.h"

namespace kvtier::server {
namespace {

using testing::Bulk;
using testing::PackKeys;
using testing::ParseReply;
using testing::Resp;
using testing::TestClient;
using testing::TestKey;
using testing::TestServer;

constexpr size_t kBlockBytes = 4096;
constexpr uint64_t kPoolBytes = uint64_t{16} << 20;
constexpr uint64_t kArenaBytes = uint64_t{64} << 20;

// The whole memfd `fd` (taken over) as the client maps it.
class Mapping {
 public:
  Mapping(int fd, uint64_t bytes) : fd_(fd), bytes_(bytes) {
    void* p = fd_ < 0 ? MAP_FAILED : mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd_, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<const char*>(p);
  }
  ~Mapping() {
    if (base_ != nullptr) munmap(const_cast<char*>(base_), bytes_);
    if (fd_ >= 0) close(fd_);
  }
  const char* base() const { return base_; }

 private:
  int fd_;
  uint64_t bytes_;
  const char* base_ = nullptr;
};

std::string GpuAttachReply() {
  return "*8\r\n" + Bulk("kind") + Bulk("memfd") + Bulk("pool_bytes") + ":" +
         std::to_string(kPoolBytes) + "\r\n" + Bulk("device") + ":-1\r\n" + Bulk("handle") +
         Bulk("");
}

std::string Block(char fill) { return std::string(kBlockBytes, fill); }

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

class GpuPoolTest : public ::testing::Test {
 protected:
  GpuPoolTest() : ts_(ServerOptions{}, /*with_arena=*/true, kArenaBytes, kPoolBytes) {}

  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectUnix();
    const std::string reply = c_.Call({"KVT.REGISTER", "model", "m", "dtype", "int8", "layers", "1",
                                       "kv_heads", "1", "head_dim", "1", "block_tokens", "1",
                                       "layout", "l", "block_bytes", std::to_string(kBlockBytes)});
    ns_hex_ = ParseReply(reply).elements.at(1).str;
    std::optional<Key128> id = Key128::FromHex(ns_hex_);
    ASSERT_TRUE(id.has_value()) << reply;
    ns_ = NamespaceId{*id};
  }

  void Place(TierId tier, uint64_t key, char fill) {
    const std::string bytes = Block(fill);
    ASSERT_TRUE(ts_.PlaceBlock(tier, ns_, TestKey(key), AsBytes(bytes)).ok());
  }

  // Sends KVT.GPUATTACH on `client` and maps the pool it receives.
  std::unique_ptr<Mapping> GpuAttach(TestClient& client) {
    EXPECT_EQ(client.Call({"KVT.GPUATTACH"}), GpuAttachReply());
    EXPECT_EQ(client.received_fds(), 1u);
    return std::make_unique<Mapping>(client.TakeReceivedFd(), kPoolBytes);
  }

  TestServer ts_;
  TestClient c_;
  std::string ns_hex_;
  NamespaceId ns_;
};

TEST_F(GpuPoolTest, GpuAttachPassesThePoolsMemfd) {
  ASSERT_TRUE(c_.Send(Resp({"PING"}) + Resp({"KVT.GPUATTACH"}) + Resp({"PING"})));
  EXPECT_EQ(c_.ReadReply(), "+PONG\r\n");
  EXPECT_EQ(c_.ReadReply(), GpuAttachReply());
  EXPECT_EQ(c_.ReadReply(), "+PONG\r\n");
  ASSERT_EQ(c_.received_fds(), 1u);
  const int fd = c_.TakeReceivedFd();
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kPoolBytes);
  // The client's mapping and the daemon's pool are the same pages.
  Mapping map(fd, kPoolBytes);
  ASSERT_NE(map.base(), nullptr);
  std::memcpy(ts_.gpu()->pool_base(), "pooled", 6);
  EXPECT_EQ(std::string(map.base(), 6), "pooled");
}

TEST_F(GpuPoolTest, Resp3GetsAMap) {
  ASSERT_EQ(c_.Call({"HELLO", "3"}).substr(0, 1), "%");
  EXPECT_EQ(c_.Call({"KVT.GPUATTACH"}).substr(0, 4), "%4\r\n");
  EXPECT_EQ(c_.received_fds(), 1u);
}

TEST_F(GpuPoolTest, GpuAttachNeedsTheUnixSocket) {
  TestClient tcp = ts_.ConnectTcp();
  EXPECT_EQ(tcp.Call({"KVT.GPUATTACH"}),
            "-ERR KVT.GPUATTACH needs the Unix socket: shared memory is local to the node\r\n");
  EXPECT_EQ(tcp.received_fds(), 0u);
}

TEST_F(GpuPoolTest, AnAttachedConnectionLeasesGpuBlocksWithTheirTier) {
  Place(TierId::kGpu, 0, 'g');
  Place(TierId::kGpu, 1, 'h');
  Place(TierId::kHost, 2, 'i');
  std::unique_ptr<Mapping> pool = GpuAttach(c_);
  ASSERT_NE(pool->base(), nullptr);
  const resp::Reply reply =
      ParseReply(c_.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0), TestKey(1), TestKey(2)})}));
  ASSERT_EQ(reply.elements.size(), 3u);
  const char fills[] = {'g', 'h', 'i'};
  for (size_t i = 0; i < 3; ++i) {
    const resp::Reply& grant = reply.elements[i];
    ASSERT_EQ(grant.elements.size(), 5u) << i;
    EXPECT_EQ(grant.elements[0].str, "OK");
    EXPECT_EQ(grant.elements[3].integer, static_cast<int64_t>(kBlockBytes));
    if (i < 2) {
      // [OK, id, offset, length, 0]: the offset is in the GPU pool, whose bytes are the block's.
      EXPECT_EQ(grant.elements[4].integer, 0);
      const uint64_t offset = static_cast<uint64_t>(grant.elements[2].integer);
      ASSERT_LE(offset + kBlockBytes, kPoolBytes);
      EXPECT_EQ(std::string(pool->base() + offset, kBlockBytes), Block(fills[i]));
    } else {
      EXPECT_EQ(grant.elements[4].integer, 1);  // the host arena
    }
  }
  EXPECT_EQ(ts_.store().Stats().leases_active, 3u);
  // A leased GPU block is pinned: it cannot be removed until it is released.
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_hex_, PackKeys({TestKey(0)})}), ":0\r\n");
  EXPECT_EQ(c_.Call({"KVT.RELEASE", std::to_string(reply.elements[0].elements[1].integer),
                     std::to_string(reply.elements[1].elements[1].integer),
                     std::to_string(reply.elements[2].elements[1].integer)}),
            "*3\r\n+OK\r\n+OK\r\n+OK\r\n");
  EXPECT_TRUE(ts_.WaitForLeases(0));
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_hex_, PackKeys({TestKey(0)})}), ":1\r\n");
}

TEST_F(GpuPoolTest, MissesKeepTheirFourElements) {
  Place(TierId::kGpu, 0, 'g');
  std::unique_ptr<Mapping> pool = GpuAttach(c_);
  const std::string raw = c_.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0), TestKey(1)})});
  const resp::Reply reply = ParseReply(raw);
  ASSERT_EQ(reply.elements.size(), 2u);
  EXPECT_EQ(reply.elements[0].elements.size(), 5u);
  EXPECT_TRUE(raw.ends_with("*4\r\n+NOTFOUND\r\n:0\r\n:0\r\n:0\r\n")) << raw;
}

TEST_F(GpuPoolTest, AConnectionThatDidNotAttachKeepsTodaysReplies) {
  Place(TierId::kGpu, 0, 'g');
  Place(TierId::kHost, 1, 'i');
  // Another connection's attach changes nothing for this one.
  TestClient attached = ts_.ConnectUnix();
  std::unique_ptr<Mapping> pool = GpuAttach(attached);
  // The GPU block is not leased: NOTFOUND, and the client falls back to KVT.GET.
  EXPECT_EQ(c_.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0)})}),
            "*1\r\n*4\r\n+NOTFOUND\r\n:0\r\n:0\r\n:0\r\n");
  EXPECT_TRUE(ts_.WaitForLeases(0));
  EXPECT_EQ(c_.Call({"KVT.GET", ns_hex_, PackKeys({TestKey(0)})}), "*1\r\n" + Bulk(Block('g')));
  // A host block gets the four-element grant it always did.
  const resp::Reply host = ParseReply(c_.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(1)})}));
  ASSERT_EQ(host.elements.size(), 1u);
  EXPECT_EQ(host.elements[0].elements.size(), 4u);
  EXPECT_EQ(host.elements[0].elements[0].str, "OK");
}

TEST_F(GpuPoolTest, ADetachedConnectionIsLeasedHostBlocksOnly) {
  Place(TierId::kGpu, 0, 'g');
  std::unique_ptr<Mapping> pool = GpuAttach(c_);
  const resp::Reply before = ParseReply(c_.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0)})}));
  ASSERT_EQ(before.elements.size(), 1u);
  ASSERT_EQ(before.elements[0].elements.size(), 5u);
  EXPECT_EQ(before.elements[0].elements[0].str, "OK");
  EXPECT_EQ(c_.Call({"KVT.GPUDETACH"}), "+OK\r\n");
  // The lease granted before the detach is still this connection's to release.
  EXPECT_EQ(ts_.store().Stats().leases_active, 1u);
  EXPECT_EQ(c_.Call({"KVT.RELEASE", std::to_string(before.elements[0].elements[1].integer)}),
            "*1\r\n+OK\r\n");
  // Later acquires are answered as on a connection that never attached.
  EXPECT_EQ(c_.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0)})}),
            "*1\r\n*4\r\n+NOTFOUND\r\n:0\r\n:0\r\n:0\r\n");
  EXPECT_TRUE(ts_.WaitForLeases(0));
  // Detaching twice, or without attaching, is harmless.
  EXPECT_EQ(c_.Call({"KVT.GPUDETACH"}), "+OK\r\n");
  TestClient other = ts_.ConnectUnix();
  EXPECT_EQ(other.Call({"KVT.GPUDETACH"}), "+OK\r\n");
}

TEST_F(GpuPoolTest, AClientThatDisconnectsReleasesItsGpuLeases) {
  Place(TierId::kGpu, 0, 'g');
  Place(TierId::kGpu, 1, 'h');
  TestClient reader = ts_.ConnectUnix();
  std::unique_ptr<Mapping> pool = GpuAttach(reader);
  const resp::Reply reply =
      ParseReply(reader.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0), TestKey(1)})}));
  ASSERT_EQ(reply.elements.size(), 2u);
  ASSERT_EQ(reply.elements[1].elements.at(0).str, "OK");
  EXPECT_EQ(ts_.store().Stats().leases_active, 2u);
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_hex_, PackKeys({TestKey(0), TestKey(1)})}), ":0\r\n");
  reader.Close();
  pool.reset();
  ASSERT_TRUE(ts_.WaitForClients(1));
  EXPECT_TRUE(ts_.WaitForLeases(0));
  // The pool itself is untouched: the blocks are still served, then removable.
  EXPECT_EQ(c_.Call({"KVT.GET", ns_hex_, PackKeys({TestKey(1)})}), "*1\r\n" + Bulk(Block('h')));
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_hex_, PackKeys({TestKey(0), TestKey(1)})}), ":2\r\n");
}

// Shutdown does not free the pool under its importers: the server counts the connections that
// attached, tells each of them to let go in the reply to its next command, and waits (bounded)
// until each has detached or disconnected.
TEST_F(GpuPoolTest, ShutdownWaitsForTheClientsThatMapThePool) {
  Place(TierId::kGpu, 0, 'g');
  TestClient detaching = ts_.ConnectUnix();
  TestClient leaving = ts_.ConnectUnix();
  std::unique_ptr<Mapping> pool_a = GpuAttach(detaching);
  std::unique_ptr<Mapping> pool_b = GpuAttach(leaving);
  // A copy out of the pool is under way when the stop begins: its lease must still end by
  // RELEASE, not by deadline.
  const resp::Reply copying =
      ParseReply(detaching.Call({"KVT.ACQUIRE", ns_hex_, PackKeys({TestKey(0)})}));
  ASSERT_EQ(copying.elements.size(), 1u);
  ASSERT_EQ(copying.elements[0].elements.at(0).str, "OK");
  EXPECT_EQ(ts_.server().gpu_importers(), 2u);
  // Attaching twice on one connection is one importer.
  EXPECT_EQ(detaching.Call({"KVT.GPUATTACH"}), GpuAttachReply());
  EXPECT_EQ(ts_.server().gpu_importers(), 2u);

  // With both attached the wait runs out, and says how many are left.
  EXPECT_EQ(ts_.server().DrainGpuImporters(std::chrono::milliseconds(0)), 2u);
  // Draining: attached connections hear it from every command but the ways to let go; the others
  // are served as before, and nobody may attach any more.
  EXPECT_EQ(detaching.Call({"PING"}).rfind("-SHUTDOWN kvtierd is stopping", 0), 0u);
  EXPECT_EQ(
      detaching.Call({"KVT.RELEASE", std::to_string(copying.elements[0].elements[1].integer)}),
      "*1\r\n+OK\r\n");
  EXPECT_TRUE(ts_.WaitForLeases(0));
  EXPECT_EQ(c_.Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c_.Call({"KVT.GPUATTACH"}).rfind("-SHUTDOWN KVT.GPUATTACH", 0), 0u);

  // One closes its mapping and detaches, the other closes its mapping and disconnects: the wait
  // ends with none left, long before its timeout.
  size_t left = 99;
  std::thread drain([&] { left = ts_.server().DrainGpuImporters(std::chrono::hours(1)); });
  pool_a.reset();
  EXPECT_EQ(detaching.Call({"KVT.GPUDETACH"}), "+OK\r\n");
  pool_b.reset();
  leaving.Close();
  drain.join();
  EXPECT_EQ(left, 0u);
  EXPECT_EQ(ts_.server().gpu_importers(), 0u);
  EXPECT_EQ(detaching.Call({"PING"}), "+PONG\r\n");  // detached: served again until Stop
}

TEST_F(GpuPoolTest, ReservationsStayInTheArena) {
  // The shared-memory put never writes into the pool: puts land in the host arena, and blocks
  // reach the pool only by the store's promotion.
  std::unique_ptr<Mapping> pool = GpuAttach(c_);
  const std::string reply =
      c_.Call({"KVT.RESERVE", ns_hex_, PackKeys({TestKey(7)}), std::to_string(kBlockBytes)});
  EXPECT_EQ(reply.substr(0, 13), "*1\r\n*3\r\n+OK\r\n") << reply;
  EXPECT_EQ(ts_.tier().Stats().block_count, 1u);
  EXPECT_EQ(ts_.gpu()->Stats().block_count, 0u);
}

TEST(GpuPoolWithoutPoolTest, GpuAttachSaysWhyThereIsNoPool) {
  ServerOptions options;
  options.gpu_tier_note = "no GPU tier: built without CUDA (KVTIER_WITH_CUDA=OFF)";
  TestServer ts(options);
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectUnix();
  EXPECT_EQ(c.Call({"KVT.GPUATTACH"}),
            "-NOTFOUND KVT.GPUATTACH: no GPU tier: built without CUDA (KVTIER_WITH_CUDA=OFF)\r\n");
  EXPECT_EQ(c.received_fds(), 0u);

  TestServer unnoted;
  ASSERT_TRUE(unnoted.status().ok());
  TestClient d = unnoted.ConnectUnix();
  EXPECT_EQ(d.Call({"KVT.GPUATTACH"}),
            "-NOTFOUND KVT.GPUATTACH: this daemon does not share a GPU pool\r\n");
}

}  // namespace
}  // namespace kvtier::server

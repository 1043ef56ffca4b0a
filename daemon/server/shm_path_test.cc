// The shared-memory path: KVT.ATTACH passes the arena's memfd, RESERVE/COMMIT/ABORT write through
// it, ACQUIRE/RELEASE read through it, and a client that vanishes leaves nothing behind.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

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
using testing::TimedCommands;

constexpr size_t kBlockBytes = 4096;
constexpr uint64_t kArenaBytes = uint64_t{64} << 20;

// One entry of RESERVE or ACQUIRE: status, id, offset (and length).
struct Grant {
  std::string status;
  uint64_t id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

std::vector<Grant> Grants(const std::string& raw) {
  std::vector<Grant> out;
  for (const resp::Reply& e : ParseReply(raw).elements) {
    Grant g;
    g.status = e.elements.at(0).str;
    g.id = static_cast<uint64_t>(e.elements.at(1).integer);
    g.offset = static_cast<uint64_t>(e.elements.at(2).integer);
    if (e.elements.size() > 3) g.length = static_cast<uint64_t>(e.elements.at(3).integer);
    out.push_back(g);
  }
  return out;
}

// The arena as the client maps it.
class Mapping {
 public:
  explicit Mapping(int fd) : fd_(fd) {
    if (fd_ >= 0) {
      void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    }
  }
  ~Mapping() {
    if (base_ != nullptr) munmap(base_, kArenaBytes);
    if (fd_ >= 0) close(fd_);
  }
  char* base() const { return base_; }

 private:
  int fd_;
  char* base_ = nullptr;
};

class ShmPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ts_.status().ok()) << ts_.status().ToString();
    c_ = ts_.ConnectUnix();
    const std::string reply = c_.Call({"KVT.REGISTER", "model", "m", "dtype", "int8", "layers", "1",
                                       "kv_heads", "1", "head_dim", "1", "block_tokens", "1",
                                       "layout", "l", "block_bytes", std::to_string(kBlockBytes)});
    ns_ = ParseReply(reply).elements.at(1).str;
    ASSERT_EQ(ns_.size(), 32u) << reply;
  }

  // Attaches `client` and maps the arena it receives.
  std::unique_ptr<Mapping> Attach(TestClient& client) {
    EXPECT_EQ(client.Call({"KVT.ATTACH"}),
              "*4\r\n$11\r\narena_bytes\r\n:" + std::to_string(kArenaBytes) +
                  "\r\n$4\r\ntier\r\n$4\r\nhost\r\n");
    EXPECT_EQ(client.received_fds(), 1u);
    return std::make_unique<Mapping>(client.TakeReceivedFd());
  }

  TestServer ts_;
  TestClient c_;
  std::string ns_;
};

TEST_F(ShmPathTest, AttachPassesTheArena) {
  std::unique_ptr<Mapping> map = Attach(c_);
  ASSERT_NE(map->base(), nullptr);
  // The client's view and the daemon's are the same pages.
  std::memcpy(ts_.tier().arena().base(), "shared", 6);
  EXPECT_EQ(std::string(map->base(), 6), "shared");
}

TEST_F(ShmPathTest, TheDescriptorRidesOnItsOwnReply) {
  ASSERT_TRUE(c_.Send(Resp({"PING"}) + Resp({"KVT.ATTACH"}) + Resp({"PING"})));
  EXPECT_EQ(c_.ReadReply(), "+PONG\r\n");
  EXPECT_EQ(c_.ReadReply().substr(0, 4), "*4\r\n");
  EXPECT_EQ(c_.ReadReply(), "+PONG\r\n");
  ASSERT_EQ(c_.received_fds(), 1u);
  struct stat st {};
  const int fd = c_.TakeReceivedFd();
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kArenaBytes);
  close(fd);
}

TEST_F(ShmPathTest, ReserveCommitAcquireRelease) {
  std::unique_ptr<Mapping> map = Attach(c_);
  ASSERT_NE(map->base(), nullptr);
  const std::string keys = PackKeys({TestKey(0), TestKey(1)});
  std::vector<Grant> r = Grants(c_.Call({"KVT.RESERVE", ns_, keys, std::to_string(kBlockBytes)}));
  ASSERT_EQ(r.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(r[i].status, "OK");
    std::memset(map->base() + r[i].offset, 'a' + static_cast<int>(i), kBlockBytes);
  }
  // Reserved, not committed: nobody sees the blocks yet.
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  EXPECT_EQ(c_.Call({"KVT.COMMIT", std::to_string(r[0].id), std::to_string(r[1].id)}),
            "*2\r\n+OK\r\n+OK\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:2\r\n$2\r\n11\r\n");

  std::vector<Grant> a = Grants(c_.Call({"KVT.ACQUIRE", ns_, keys}));
  ASSERT_EQ(a.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(a[i].status, "OK");
    ASSERT_EQ(a[i].length, kBlockBytes);
    EXPECT_EQ(std::string(map->base() + a[i].offset, kBlockBytes),
              std::string(kBlockBytes, static_cast<char>('a' + i)));
  }
  EXPECT_EQ(ts_.store().Stats().leases_active, 2u);
  EXPECT_EQ(c_.Call({"KVT.RELEASE", std::to_string(a[0].id), std::to_string(a[1].id)}),
            "*2\r\n+OK\r\n+OK\r\n");
  EXPECT_EQ(c_.Call({"KVT.RELEASE", std::to_string(a[0].id)}), "*1\r\n+NOTFOUND\r\n");
  EXPECT_TRUE(ts_.WaitForLeases(0));
  // The inline path reads what was written through shared memory.
  EXPECT_EQ(c_.Call({"KVT.GET", ns_, PackKeys({TestKey(1)})}),
            "*1\r\n" + Bulk(std::string(kBlockBytes, 'b')));
}

// RESERVE is the put of the shared-memory path and COMMIT its second half, ACQUIRE its get, and
// KVT.LOOKUP of an attached client its lookup; RELEASE and ABORT are not timed.
TEST_F(ShmPathTest, ReserveCommitAcquireAndLookupAreTimed) {
  using metrics::RequestOp;
  using metrics::RequestPath;
  std::unique_ptr<Mapping> map = Attach(c_);
  const std::string keys = PackKeys({TestKey(0)});
  std::vector<Grant> r = Grants(c_.Call({"KVT.RESERVE", ns_, keys, std::to_string(kBlockBytes)}));
  ASSERT_EQ(r.at(0).status, "OK");
  EXPECT_EQ(c_.Call({"KVT.COMMIT", std::to_string(r[0].id)}), "*1\r\n+OK\r\n");
  EXPECT_EQ(c_.Call({"KVT.COMMIT", "999999"}), "*1\r\n+NOTFOUND\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:1\r\n$1\r\n1\r\n");
  std::vector<Grant> a = Grants(c_.Call({"KVT.ACQUIRE", ns_, keys}));
  ASSERT_EQ(a.at(0).status, "OK");
  EXPECT_EQ(c_.Call({"KVT.RELEASE", std::to_string(a[0].id)}), "*1\r\n+OK\r\n");
  EXPECT_EQ(Grants(c_.Call({"KVT.ACQUIRE", ns_, PackKeys({TestKey(9)})})).at(0).status, "NOTFOUND");
  Server& server = ts_.server();
  EXPECT_EQ(TimedCommands(server, RequestOp::kPut, RequestPath::kShm, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kCommit, RequestPath::kShm, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kCommit, RequestPath::kShm, std::nullopt), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kLookup, RequestPath::kShm, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kGet, RequestPath::kShm, TierId::kHost), 1u);
  EXPECT_EQ(TimedCommands(server, RequestOp::kGet, RequestPath::kShm, std::nullopt), 1u);
  EXPECT_EQ(TimedCommands(server), 6u);
}

TEST_F(ShmPathTest, AbortAndPerKeyStatuses) {
  const std::string keys = PackKeys({TestKey(5)});
  std::vector<Grant> r = Grants(c_.Call({"KVT.RESERVE", ns_, keys, std::to_string(kBlockBytes)}));
  ASSERT_EQ(r.at(0).status, "OK");
  // A second writer of the same key waits its turn.
  EXPECT_EQ(c_.Call({"KVT.RESERVE", ns_, keys, std::to_string(kBlockBytes)}),
            "*1\r\n*3\r\n+BUSY\r\n:0\r\n:0\r\n");
  EXPECT_EQ(c_.Call({"KVT.RESERVE", ns_, PackKeys({TestKey(6)}), "100"}),
            "*1\r\n*3\r\n+INVALID\r\n:0\r\n:0\r\n");
  EXPECT_EQ(c_.Call({"KVT.ABORT", std::to_string(r[0].id), "999999"}),
            "*2\r\n+OK\r\n+NOTFOUND\r\n");
  EXPECT_EQ(c_.Call({"KVT.COMMIT", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  EXPECT_EQ(ts_.store().Stats().blocks_writing, 0u);
}

TEST_F(ShmPathTest, AcquireStopsAtTheFirstMiss) {
  ASSERT_EQ(c_.Call({"KVT.PUT", ns_, PackKeys({TestKey(0), TestKey(2)}),
                     std::string(kBlockBytes, 'x'), std::string(kBlockBytes, 'z')}),
            "*2\r\n+OK\r\n+OK\r\n");
  std::vector<Grant> a =
      Grants(c_.Call({"KVT.ACQUIRE", ns_, PackKeys({TestKey(0), TestKey(1), TestKey(2)})}));
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].status, "OK");
  EXPECT_EQ(a[1].status, "NOTFOUND");
  EXPECT_EQ(a[2].status, "NOTFOUND");  // present, but useless without block 1
  EXPECT_EQ(a[2].id, 0u);
  EXPECT_EQ(ts_.store().Stats().leases_active, 1u);
}

TEST_F(ShmPathTest, IdsBelongToTheirConnection) {
  TestClient other = ts_.ConnectUnix();
  std::vector<Grant> r =
      Grants(c_.Call({"KVT.RESERVE", ns_, PackKeys({TestKey(9)}), std::to_string(kBlockBytes)}));
  ASSERT_EQ(r.at(0).status, "OK");
  EXPECT_EQ(other.Call({"KVT.COMMIT", std::to_string(r[0].id)}), "*1\r\n+NOTFOUND\r\n");
  EXPECT_EQ(other.Call({"KVT.ABORT", std::to_string(r[0].id)}), "*1\r\n+NOTFOUND\r\n");
  EXPECT_EQ(c_.Call({"KVT.COMMIT", std::to_string(r[0].id)}), "*1\r\n+OK\r\n");
  std::vector<Grant> a = Grants(c_.Call({"KVT.ACQUIRE", ns_, PackKeys({TestKey(9)})}));
  ASSERT_EQ(a.at(0).status, "OK");
  EXPECT_EQ(other.Call({"KVT.RELEASE", std::to_string(a[0].id)}), "*1\r\n+NOTFOUND\r\n");
  EXPECT_EQ(ts_.store().Stats().leases_active, 1u);
}

TEST_F(ShmPathTest, AClientKilledMidPutLeavesNoPartialBlock) {
  TestClient writer = ts_.ConnectUnix();
  std::unique_ptr<Mapping> map = Attach(writer);
  const std::string keys = PackKeys({TestKey(3)});
  std::vector<Grant> r =
      Grants(writer.Call({"KVT.RESERVE", ns_, keys, std::to_string(kBlockBytes)}));
  ASSERT_EQ(r.at(0).status, "OK");
  std::memset(map->base() + r[0].offset, 'h', kBlockBytes / 2);  // half written, then gone
  EXPECT_EQ(ts_.store().Stats().blocks_writing, 1u);
  writer.Close();
  ASSERT_TRUE(ts_.WaitForClients(1));
  const store::StoreStats stats = ts_.store().Stats();
  EXPECT_EQ(stats.blocks_writing, 0u);
  EXPECT_EQ(stats.aborted_puts, 1u);
  EXPECT_EQ(c_.Call({"KVT.LOOKUP", ns_, keys}), "*2\r\n:0\r\n$0\r\n\r\n");
  // The key is free for the next writer.
  EXPECT_EQ(c_.Call({"KVT.PUT", ns_, keys, std::string(kBlockBytes, 'w')}), "*1\r\n+OK\r\n");
}

// The connection may end while the client still copies into its slot (the daemon closed it: an
// idle timeout, a protocol error): the slot is not handed to another writer before the
// quarantine ends, so a late copy cannot land in someone else's block.
TEST_F(ShmPathTest, AReservationLeftByAClosedConnectionIsNotGivenToTheNextWriter) {
  TestClient writer = ts_.ConnectUnix();
  std::unique_ptr<Mapping> map = Attach(writer);
  std::vector<Grant> r = Grants(
      writer.Call({"KVT.RESERVE", ns_, PackKeys({TestKey(5)}), std::to_string(kBlockBytes)}));
  ASSERT_EQ(r.at(0).status, "OK");
  writer.Close();
  ASSERT_TRUE(ts_.WaitForClients(1));
  EXPECT_EQ(ts_.store().Stats().blocks_quarantined, 1u);
  std::vector<Grant> next =
      Grants(c_.Call({"KVT.RESERVE", ns_, PackKeys({TestKey(6)}), std::to_string(kBlockBytes)}));
  ASSERT_EQ(next.at(0).status, "OK");
  EXPECT_NE(next[0].offset, r[0].offset);
  EXPECT_EQ(c_.Call({"KVT.ABORT", std::to_string(next[0].id)}), "*1\r\n+OK\r\n");
}

TEST_F(ShmPathTest, AClientKilledMidGetLeavesNoLease) {
  const std::string keys = PackKeys({TestKey(4)});
  ASSERT_EQ(c_.Call({"KVT.PUT", ns_, keys, std::string(kBlockBytes, 'r')}), "*1\r\n+OK\r\n");
  TestClient reader = ts_.ConnectUnix();
  std::vector<Grant> a = Grants(reader.Call({"KVT.ACQUIRE", ns_, keys}));
  ASSERT_EQ(a.at(0).status, "OK");
  EXPECT_EQ(ts_.store().Stats().leases_active, 1u);
  // A leased block cannot be removed...
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_, keys}), ":0\r\n");
  reader.Close();
  ASSERT_TRUE(ts_.WaitForClients(1));
  EXPECT_TRUE(ts_.WaitForLeases(0));
  // ...and once its reader is gone it is an ordinary block again.
  EXPECT_EQ(c_.Call({"KVT.DEL", ns_, keys}), ":1\r\n");
}

TEST_F(ShmPathTest, StopEndsEveryLeaseAndReservation) {
  ASSERT_EQ(c_.Call({"KVT.PUT", ns_, PackKeys({TestKey(0)}), std::string(kBlockBytes, 'x')}),
            "*1\r\n+OK\r\n");
  ASSERT_EQ(Grants(c_.Call({"KVT.ACQUIRE", ns_, PackKeys({TestKey(0)})})).at(0).status, "OK");
  ASSERT_EQ(
      Grants(c_.Call({"KVT.RESERVE", ns_, PackKeys({TestKey(1)}), std::to_string(kBlockBytes)}))
          .at(0)
          .status,
      "OK");
  ts_.server().Stop();
  const store::StoreStats stats = ts_.store().Stats();
  EXPECT_EQ(stats.leases_active, 0u);
  EXPECT_EQ(stats.blocks_writing, 0u);
  EXPECT_EQ(stats.blocks_present, 1u);
}

TEST_F(ShmPathTest, ShmCommandsNeedTheUnixSocket) {
  TestClient tcp = ts_.ConnectTcp();
  EXPECT_EQ(tcp.Call({"KVT.ATTACH"}),
            "-ERR KVT.ATTACH needs the Unix socket: shared memory is local to the node\r\n");
  EXPECT_EQ(tcp.Call({"KVT.RESERVE", ns_, PackKeys({TestKey(0)}), "4096"}),
            "-ERR KVT.RESERVE needs the Unix socket: shared memory is local to the node\r\n");
  EXPECT_EQ(tcp.Call({"KVT.ACQUIRE", ns_, PackKeys({TestKey(0)})}),
            "-ERR KVT.ACQUIRE needs the Unix socket: shared memory is local to the node\r\n");
  EXPECT_EQ(tcp.received_fds(), 0u);
}

TEST(ShmPathWithoutArenaTest, ShmCommandsNeedAnArena) {
  TestServer ts(ServerOptions{}, /*with_arena=*/false);
  ASSERT_TRUE(ts.status().ok());
  TestClient c = ts.ConnectUnix();
  EXPECT_EQ(c.Call({"KVT.ATTACH"}),
            "-ERR KVT.ATTACH needs a host arena, and this daemon runs without one\r\n");
  EXPECT_EQ(c.received_fds(), 0u);
}

}  // namespace
}  // namespace kvtier::server

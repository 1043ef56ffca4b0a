#include "daemon/server/test_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/fd_passing.h"
#include "common/resp/reply_parser.h"
#include "daemon/config/daemon_config.h"

namespace kvtier::server::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

int ConnectTo(const sockaddr* addr, socklen_t length, int family) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, addr, length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string Resp(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

std::string Resp(std::initializer_list<std::string_view> args) {
  return Resp(std::vector<std::string>(args.begin(), args.end()));
}

std::string Bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

std::string Value(size_t bytes, char seed) {
  std::string v(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>(seed + i * 7 + i / 4093);
  return v;
}

resp::Reply ParseReply(const std::string& raw) {
  resp::ReplyParser parser;
  Result<size_t> used = parser.Feed(raw);
  EXPECT_TRUE(used.ok() && parser.has_reply()) << raw;
  return parser.has_reply() ? parser.TakeReply() : resp::Reply::Null();
}

const resp::Reply& MapValue(const resp::Reply& map, std::string_view name) {
  static const resp::Reply kMissing = resp::Reply::Null();
  for (size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (map.elements[i].str == name) return map.elements[i + 1];
  }
  return kMissing;
}

::testing::AssertionResult SameReply(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  return ::testing::AssertionFailure()
         << "reply of " << got.size() << " bytes, expected " << want.size()
         << "; first difference at byte " << at << ": got '" << got.substr(at, 16) << "'";
}

BlockKey TestKey(uint64_t n) {
  BlockKey k;
  k.high = 0xABCD0000'00000000ULL | n;
  k.low = n * 0x9E3779B97F4A7C15ULL + 1;
  return k;
}

std::string PackKeys(const std::vector<BlockKey>& keys) {
  std::string out(keys.size() * 16, '\0');
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i].ToBytes(reinterpret_cast<std::byte*>(out.data() + 16 * i));
  }
  return out;
}

bool WaitFor(const std::function<bool()>& condition, milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  while (!condition()) {
    if (steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TestClient TestClient::ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return TestClient(ConnectTo(reinterpret_cast<sockaddr*>(&addr), sizeof(addr), AF_UNIX));
}

TestClient TestClient::ConnectTcp(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  TestClient client(ConnectTo(reinterpret_cast<sockaddr*>(&addr), sizeof(addr), AF_INET));
  int one = 1;
  if (client.fd_ >= 0) setsockopt(client.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return client;
}

TestClient::~TestClient() { Close(); }

TestClient::TestClient(TestClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      pending_(std::move(other.pending_)),
      fds_(std::move(other.fds_)) {}

TestClient& TestClient::operator=(TestClient&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    pending_ = std::move(other.pending_);
    fds_ = std::move(other.fds_);
  }
  return *this;
}

void TestClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  for (int fd : fds_) close(fd);
  fds_.clear();
}

void TestClient::ShutdownWrite() {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

bool TestClient::Send(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string TestClient::Call(std::initializer_list<std::string_view> args) {
  return Send(Resp(args)) ? ReadReply() : std::string();
}

std::string TestClient::Call(const std::vector<std::string>& args) {
  return Send(Resp(args)) ? ReadReply() : std::string();
}

bool TestClient::ReceiveMore(milliseconds timeout, bool* closed) {
  pollfd p{fd_, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return false;
  char buf[64 << 10];
  const ssize_t n = ReceiveWithFds(fd_, buf, 0, fds_);
  if (n <= 0) {
    if (closed != nullptr) *closed = true;
    return false;
  }
  pending_.append(buf, static_cast<size_t>(n));
  return true;
}

std::string TestClient::ReadReply(milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  for (;;) {
    resp::ReplyParser parser;
    Result<size_t> used = parser.Feed(pending_);
    if (used.ok() && parser.has_reply()) {
      std::string reply = pending_.substr(0, *used);
      // Swapped, not erased or assigned: the buffer of a big reply is not kept by an idle client
      // (it would distort the server's memory tests, which measure the whole process).
      std::string rest = pending_.substr(*used);
      pending_.swap(rest);
      return reply;
    }
    if (!used.ok()) return "<unparsable reply: " + pending_ + ">";
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0 || !ReceiveMore(left, nullptr)) return std::string();
  }
}

std::string TestClient::ReadUntilClosed(bool* closed, milliseconds timeout) {
  *closed = false;
  const auto deadline = steady_clock::now() + timeout;
  while (!*closed) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) break;
    ReceiveMore(left, closed);
  }
  return std::exchange(pending_, std::string());
}

int TestClient::TakeReceivedFd() {
  if (fds_.empty()) return -1;
  const int fd = fds_.front();
  fds_.erase(fds_.begin());
  return fd;
}

TestServer::TestServer(ServerOptions options, bool with_arena, uint64_t capacity_bytes,
                       uint64_t gpu_pool_bytes)
    : options_(std::move(options)) {
  std::unique_ptr<tiers::DeviceTier> gpu;
  if (gpu_pool_bytes > 0) {
    auto fake = tiers::FakeGpuTier::Create({.fake = true, .capacity_bytes = gpu_pool_bytes});
    if (!fake.ok()) {
      status_ = fake.status();
      return;
    }
    gpu = std::move(fake).value();
  }
  status_ = Init(with_arena, capacity_bytes, std::move(gpu));
}

TestServer::TestServer(ServerOptions options, std::unique_ptr<tiers::DeviceTier> gpu_pool)
    : options_(std::move(options)) {
  status_ = Init(/*with_arena=*/true, uint64_t{64} << 20, std::move(gpu_pool));
}

TestServer::TestServer(ServerOptions options, store::StoreOptions store_options,
                       std::unique_ptr<tiers::Tier> below_host)
    : options_(std::move(options)),
      store_options_(std::move(store_options)),
      below_host_(std::move(below_host)) {
  status_ = Init(/*with_arena=*/true, uint64_t{64} << 20, nullptr);
}

Status TestServer::Init(bool with_arena, uint64_t capacity_bytes,
                        std::unique_ptr<tiers::DeviceTier> gpu) {
  char dir[] = "/tmp/kvtier-server-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) return ErrnoStatus(errno, "mkdtemp");
  dir_ = dir;
  options_.unix_path = dir_ + "/kvtierd.sock";
  if (options_.tcp_port == 0) options_.tcp_ephemeral = true;
  // Slabs as kvtierd cuts them by default (tiers.slab_bytes: auto): a 64 MiB tier of one 64 MiB
  // slab would give up every value of one size for the first value of another.
  KVTIER_ASSIGN_OR_RETURN(
      tier_, tiers::HostTier::Create({.capacity_bytes = capacity_bytes,
                                      .slab_bytes = config::AutoSlabBytes(capacity_bytes),
                                      .try_huge_pages = false,
                                      .try_mlock = false,
                                      .name = ""}));
  gpu_ = std::move(gpu);
  std::vector<tiers::Tier*> chain = {tier_.get()};
  if (gpu_ != nullptr) chain.insert(chain.begin(), gpu_.get());
  if (below_host_ != nullptr) chain.push_back(below_host_.get());
  KVTIER_ASSIGN_OR_RETURN(store_, store::Store::Create(store_options_, chain, clock_));
  options_.shared_memory = with_arena;
  KVTIER_ASSIGN_OR_RETURN(server_, Server::Create(options_, *store_));
  return server_->Start();
}

TestServer::~TestServer() {
  if (server_) server_->Stop();
  server_.reset();
  store_.reset();
  below_host_.reset();
  tier_.reset();
  gpu_.reset();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

Status TestServer::PlaceBlock(TierId tier, const NamespaceId& ns, const BlockKey& key,
                              std::span<const std::byte> bytes) {
  tiers::Tier* target = store_->tier(tier);
  if (target == nullptr) return InvalidArgument("the test store has no such tier");
  KVTIER_ASSIGN_OR_RETURN(Extent extent, target->Allocate(bytes.size()));
  Status st = target->Write(extent, bytes);
  if (st.ok()) st = store_->AdoptBlock(tier, ns, key, extent, std::nullopt);
  if (!st.ok()) target->Free(extent);
  return st;
}

bool TestServer::WaitForClients(uint64_t n) {
  return WaitFor([&] { return server_->Stats().connected_clients == n; });
}

uint64_t TimedCommands(Server& server, metrics::RequestOp op, metrics::RequestPath path,
                       std::optional<TierId> tier) {
  const metrics::ProcessInfo info = server.ProcessInfo();
  for (const metrics::RequestLatencySeries& s : info.requests) {
    if (s.labels.op == op && s.labels.path == path && s.labels.tier == tier) {
      return s.latency.count();
    }
  }
  return 0;
}

uint64_t TimedCommands(Server& server) {
  uint64_t n = 0;
  const metrics::ProcessInfo info = server.ProcessInfo();
  for (const metrics::RequestLatencySeries& s : info.requests) {
    n += s.latency.count();
  }
  return n;
}

bool TestServer::WaitForLeases(uint64_t n) {
  return WaitFor([&] { return store_->Stats().leases_active == n; });
}

}  // namespace kvtier::server::testing

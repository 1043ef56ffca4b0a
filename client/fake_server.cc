#include "client/fake_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/fd_passing.h"
#include "common/keys.h"
#include "common/types.h"
#include "common/resp/reply_writer.h"
#include "common/resp/request_parser.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::client::testing {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fake server: %s: %s\n", what, std::strerror(errno));
  std::abort();
}
// Blocking write of all of `bytes`; false when the peer is gone.
bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

using NsKey = std::pair<Key128, Key128>;

struct Conn {
  int fd = -1;
  resp::RequestParser parser;
  std::string out;
  uint64_t commands = 0;
  bool authed = false;
  bool close = false;
};

}  // namespace

struct FakeServer::State {
  bool tcp = false;
  std::string password;
  std::map<std::string, std::string> raw_replies;
  std::string close_on;
  std::vector<std::string> commands;
  std::map<std::string, std::string> generic;
  std::map<Key128, uint64_t> namespaces;  // id -> block bytes
  std::map<NsKey, Extent> blocks;
  struct Reservation {
    NsKey key;
    Extent extent;
  };
  std::map<uint64_t, Reservation> reservations;
  std::map<uint64_t, Extent> leases;
  uint64_t next_id = 1;
  uint64_t next_offset = 0;
  int memfd = -1;
  std::byte* arena = nullptr;
  uint64_t arena_bytes = 0;

  std::optional<Extent> Allocate(uint64_t bytes) {
    if (next_offset + bytes > arena_bytes) return std::nullopt;
    Extent e{next_offset, bytes};
    next_offset += bytes;
    return e;
  }

  // Parses packed keys; false (with an error written) when malformed.
  static bool Keys(const std::string& packed, std::vector<Key128>* out, resp::ReplyWriter& w) {
    if (packed.size() % 16 != 0) {
      w.AppendError("ERR packed keys must be a multiple of 16 bytes");
      return false;
    }
    for (size_t i = 0; i < packed.size(); i += 16) {
      out->push_back(Key128::FromBytes(reinterpret_cast<const std::byte*>(packed.data() + i)));
    }
    return true;
  }

  void Register(const resp::Command& c, resp::ReplyWriter& w) {
    hashing::NamespaceDescriptor d;
    uint64_t block_bytes = 0;
    for (size_t i = 1; i + 1 < c.size(); i += 2) {
      const std::string& f = c.args[i];
      const std::string& v = c.args[i + 1];
      auto num = [&] { return static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 10)); };
      if (f == "model") d.model_id = v;
      else if (f == "revision") d.model_revision = v;
      else if (f == "dtype") d.kv_dtype = v;
      else if (f == "layers") d.num_layers = num();
      else if (f == "kv_heads") d.num_kv_heads = num();
      else if (f == "head_dim") d.head_dim = num();
      else if (f == "block_tokens") d.tokens_per_block = num();
      else if (f == "layout") d.layout_tag = v;
      else if (f == "tp_rank") d.tp_rank = num();
      else if (f == "tp_size") d.tp_size = num();
      else if (f == "scheme") d.hash_scheme_version = num();
      else if (f == "salt") d.tenant_salt = v;
      else if (f == "block_bytes") block_bytes = std::strtoull(v.c_str(), nullptr, 10);
    }
    Result<NamespaceId> id = hashing::ComputeNamespaceId(d);
    if (!id.ok()) return w.AppendError("INVALID " + id.status().message());
    if (block_bytes == 0) block_bytes = hashing::BlockBytes(d);
    namespaces[*id] = block_bytes;
    w.AppendMapHeader(2);
    w.AppendBulk("ns");
    w.AppendBulk(id->ToHex());
    w.AppendBulk("block_bytes");
    w.AppendInteger(static_cast<int64_t>(block_bytes));
  }

  void Lookup(const Key128& ns, const std::vector<Key128>& keys, resp::ReplyWriter& w) {
    size_t prefix = 0;
    while (prefix < keys.size() && blocks.count({ns, keys[prefix]}) != 0) ++prefix;
    w.AppendArrayHeader(2);
    w.AppendInteger(static_cast<int64_t>(prefix));
    w.AppendBulk(std::string(prefix, '1'));  // ASCII tier digits: all in host memory
  }

  void Put(const resp::Command& c, const Key128& ns, const std::vector<Key128>& keys,
           resp::ReplyWriter& w) {
    if (c.size() != 3 + keys.size()) return w.AppendError("ERR wrong number of payloads");
    auto it = namespaces.find(ns);
    if (it == namespaces.end()) return w.AppendError("NOTFOUND unknown namespace");
    w.AppendArrayHeader(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string& payload = c.args[3 + i];
      if (payload.size() != it->second) {
        w.AppendSimpleString("INVALID");
      } else if (blocks.count({ns, keys[i]}) != 0) {
        w.AppendSimpleString("EXISTS");
      } else if (std::optional<Extent> e = Allocate(payload.size())) {
        std::memcpy(arena + e->offset, payload.data(), payload.size());
        blocks[{ns, keys[i]}] = *e;
        w.AppendSimpleString("OK");
      } else {
        w.AppendSimpleString("BUSY");
      }
    }
  }

  void Get(const Key128& ns, const std::vector<Key128>& keys, resp::ReplyWriter& w) {
    w.AppendArrayHeader(keys.size());
    bool hit = true;
    for (const Key128& key : keys) {
      auto it = blocks.find({ns, key});
      hit = hit && it != blocks.end();
      if (!hit) {
        w.AppendNull();
        continue;
      }
      w.AppendBulk(std::string_view(reinterpret_cast<const char*>(arena + it->second.offset),
                                    it->second.length));
    }
  }

  void Reserve(const Key128& ns, const std::vector<Key128>& keys, uint64_t bytes,
               resp::ReplyWriter& w) {
    w.AppendArrayHeader(keys.size());
    for (const Key128& key : keys) {
      w.AppendArrayHeader(3);
      std::optional<Extent> e;
      if (blocks.count({ns, key}) != 0) {
        w.AppendSimpleString("EXISTS");
      } else if ((e = Allocate(bytes))) {
        const uint64_t id = next_id++;
        reservations[id] = Reservation{{ns, key}, *e};
        w.AppendSimpleString("OK");
        w.AppendInteger(static_cast<int64_t>(id));
        w.AppendInteger(static_cast<int64_t>(e->offset));
        continue;
      } else {
        w.AppendSimpleString("BUSY");
      }
      w.AppendInteger(0);
      w.AppendInteger(0);
    }
  }

  void Finish(const resp::Command& c, bool commit, bool expire, resp::ReplyWriter& w) {
    w.AppendArrayHeader(c.size() - 1);
    for (size_t i = 1; i < c.size(); ++i) {
      auto it = reservations.find(std::strtoull(c.args[i].c_str(), nullptr, 10));
      if (it == reservations.end() || expire) {
        if (it != reservations.end()) reservations.erase(it);
        w.AppendSimpleString("NOTFOUND");
        continue;
      }
      if (commit) blocks[it->second.key] = it->second.extent;
      reservations.erase(it);
      w.AppendSimpleString("OK");
    }
  }

  void Acquire(const Key128& ns, const std::vector<Key128>& keys, uint64_t limit,
               resp::ReplyWriter& w) {
    w.AppendArrayHeader(keys.size());
    bool hit = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = blocks.find({ns, keys[i]});
      hit = hit && it != blocks.end() && i < limit;
      w.AppendArrayHeader(4);
      if (!hit) {
        w.AppendSimpleString("NOTFOUND");
        for (int j = 0; j < 3; ++j) w.AppendInteger(0);
        continue;
      }
      const uint64_t id = next_id++;
      leases[id] = it->second;
      w.AppendSimpleString("OK");
      w.AppendInteger(static_cast<int64_t>(id));
      w.AppendInteger(static_cast<int64_t>(it->second.offset));
      w.AppendInteger(static_cast<int64_t>(it->second.length));
    }
  }

  void Release(const resp::Command& c, bool expire, resp::ReplyWriter& w) {
    w.AppendArrayHeader(c.size() - 1);
    for (size_t i = 1; i < c.size(); ++i) {
      const bool found = leases.erase(std::strtoull(c.args[i].c_str(), nullptr, 10)) != 0;
      w.AppendSimpleString(found && !expire ? "OK" : "NOTFOUND");
    }
  }

  void CountPresent(const Key128& ns, const std::vector<Key128>& keys, bool erase,
                    resp::ReplyWriter& w) {
    int64_t n = 0;
    for (const Key128& key : keys) n += erase ? blocks.erase({ns, key}) : blocks.count({ns, key});
    w.AppendInteger(n);
  }

  void Drop(const Key128& ns, resp::ReplyWriter& w) {
    if (namespaces.erase(ns) == 0) return w.AppendError("NOTFOUND unknown namespace");
    int64_t n = 0;
    for (auto it = blocks.begin(); it != blocks.end();) {
      if (it->first.first == ns) {
        it = blocks.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    w.AppendInteger(n);
  }

  // Handles one command; returns an fd to pass with the reply (ATTACH), or -1.
  int Handle(Conn& conn, const resp::Command& c, resp::ReplyWriter& w, const FakeServer& server);
};

int FakeServer::State::Handle(Conn& conn, const resp::Command& c, resp::ReplyWriter& w,
                              const FakeServer& server) {
  const std::string name = c.UpperName();
  if (!password.empty() && !conn.authed && name != "AUTH" && name != "PING") {
    w.AppendError("NOAUTH Authentication required.");
    return -1;
  }
  if (name == "PING") {
    c.size() > 1 ? w.AppendBulk(c.args[1]) : w.AppendSimpleString("PONG");
  } else if (name == "AUTH") {
    conn.authed = c.args.back() == password;
    conn.authed ? w.AppendSimpleString("OK")
                : w.AppendError("WRONGPASS invalid username-password pair");
  } else if (name == "CLIENT") {
    w.AppendSimpleString("OK");
  } else if (name == "SET" && c.size() == 3) {
    generic[c.args[1]] = c.args[2];
    w.AppendSimpleString("OK");
  } else if (name == "GET" && c.size() == 2) {
    auto it = generic.find(c.args[1]);
    it == generic.end() ? w.AppendNull() : w.AppendBulk(it->second);
  } else if (name == "KVT.REGISTER") {
    Register(c, w);
  } else if (name == "KVT.ATTACH") {
    if (tcp) {
      w.AppendError("ERR KVT.ATTACH needs a Unix socket");
      return -1;
    }
    w.AppendMapHeader(2);
    w.AppendBulk("arena_bytes");
    w.AppendInteger(static_cast<int64_t>(arena_bytes));
    w.AppendBulk("tier");
    w.AppendBulk("host");
    return memfd;
  } else if (name == "KVT.COMMIT" || name == "KVT.ABORT") {
    Finish(c, name == "KVT.COMMIT", name == "KVT.COMMIT" && server.expire_reservations, w);
  } else if (name == "KVT.RELEASE") {
    Release(c, server.expire_leases, w);
  } else if (name == "KVT.STATS") {
    w.AppendBulk("{\"blocks\": " + std::to_string(blocks.size()) + "}");
  } else if (name == "KVT.DROP" && c.size() == 2) {
    std::optional<Key128> ns = Key128::FromHex(c.args[1]);
    ns ? Drop(*ns, w) : w.AppendError("ERR bad namespace id");
  } else if (name.starts_with("KVT.") && c.size() >= 3) {
    std::optional<Key128> ns = Key128::FromHex(c.args[1]);
    std::vector<Key128> keys;
    if (!ns) {
      w.AppendError("ERR bad namespace id");
    } else if (!Keys(c.args[2], &keys, w)) {
    } else if (name == "KVT.LOOKUP") {
      Lookup(*ns, keys, w);
    } else if (name == "KVT.PUT") {
      Put(c, *ns, keys, w);
    } else if (name == "KVT.GET") {
      Get(*ns, keys, w);
    } else if (name == "KVT.RESERVE" && c.size() == 4) {
      Reserve(*ns, keys, std::strtoull(c.args[3].c_str(), nullptr, 10), w);
    } else if (name == "KVT.ACQUIRE") {
      Acquire(*ns, keys, server.acquire_limit, w);
    } else if (name == "KVT.PIN" || name == "KVT.DEL") {
      CountPresent(*ns, keys, name == "KVT.DEL", w);
    } else {
      w.AppendError("ERR unknown command '" + c.args[0] + "'");
    }
  } else {
    w.AppendError("ERR unknown command '" + c.args[0] + "'");
  }
  return -1;
}

namespace {

// Writes `conn.out`, passing `fd` with the bytes from `fd_at` on (the reply it belongs to).
void Flush(Conn& conn, int fd, size_t fd_at) {
  if (fd < 0) {
    if (!WriteAll(conn.fd, conn.out)) conn.close = true;
    conn.out.clear();
    return;
  }
  if (!WriteAll(conn.fd, std::string_view(conn.out).substr(0, fd_at))) conn.close = true;
  // The descriptor rides on the reply's first byte; whatever one sendmsg leaves goes as usual.
  std::string_view reply = std::string_view(conn.out).substr(fd_at);
  for (;;) {
    Result<size_t> sent = SendWithFd(conn.fd, reply, fd);
    if (sent.ok()) {
      if (!WriteAll(conn.fd, reply.substr(*sent))) conn.close = true;
      break;
    }
    pollfd writable{conn.fd, POLLOUT, 0};
    if (sent.status().code() != StatusCode::kBusy || ::poll(&writable, 1, -1) < 0) {
      conn.close = true;
      break;
    }
  }
  conn.out.clear();
}
}  // namespace

void FakeServer::ServeBytes(void* opaque, std::string_view input) {
  Conn& conn = *static_cast<Conn*>(opaque);
  while (!input.empty() && !conn.close) {
    Result<size_t> used = conn.parser.Feed(input);
    if (!used.ok()) {
      conn.close = true;
      return;
    }
    input.remove_prefix(*used);
    if (!conn.parser.has_command()) continue;
    const resp::Command command = conn.parser.TakeCommand();
    ++conn.commands;
    const std::string name = command.UpperName();
    MutexLock lock(mu_);
    State& s = *state_;
    s.commands.push_back(name);
    if (s.close_on == name) {
      s.close_on.clear();
      conn.close = true;
      return;
    }
    if (auto raw = s.raw_replies.find(name); raw != s.raw_replies.end()) {
      conn.out += raw->second;
      s.raw_replies.erase(raw);
      continue;
    }
    resp::ReplyWriter writer(&conn.out);
    const size_t before = conn.out.size();
    const int fd = s.Handle(conn, command, writer, *this);
    if (fd >= 0) Flush(conn, fd, before);
  }
  if (conn.commands >= hold_replies_until && !conn.out.empty()) Flush(conn, -1, 0);
}

void FakeServer::Serve() {
  pthread_setname_np(pthread_self(), "fake-kvtierd");
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<char> buffer(size_t{1} << 20);
  for (;;) {
    std::vector<pollfd> pfds = {{wake_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& conn : conns) pfds.push_back({conn->fd, POLLIN, 0});
    if (::poll(pfds.data(), pfds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Die("poll");
    }
    if (pfds[0].revents != 0) break;
    for (size_t i = 2; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      Conn& conn = *conns[i - 2];
      const ssize_t n = ::recv(conn.fd, buffer.data(), buffer.size(), 0);
      if (n <= 0) {
        conn.close = true;
        continue;
      }
      ServeBytes(&conn, std::string_view(buffer.data(), static_cast<size_t>(n)));
    }
    if ((pfds[1].revents & POLLIN) != 0) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        conns.push_back(std::make_unique<Conn>());
        conns.back()->fd = fd;
      }
    }
    std::erase_if(conns, [](const std::unique_ptr<Conn>& conn) {
      if (conn->close) ::close(conn->fd);
      return conn->close;
    });
  }
  for (const auto& conn : conns) ::close(conn->fd);
}

FakeServer::FakeServer(Options options) : options_(options), state_(std::make_unique<State>()) {
  char dir_template[] = "/tmp/kvtier-fake-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) Die("mkdtemp");
  dir_ = dir_template;
  if (options.tcp) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) Die("bind");
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    url_ = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  } else {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = dir_ + "/kvtierd.sock";
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) Die("bind");
    url_ = "unix://" + path;
  }
  if (::listen(listen_fd_, 16) < 0) Die("listen");
  if (::pipe2(wake_pipe_, O_CLOEXEC) < 0) Die("pipe");
  State& s = *state_;
  s.tcp = options.tcp;
  s.password = options.password;
  s.arena_bytes = options.arena_bytes;
  s.memfd = ::memfd_create("kvtier-fake-arena", MFD_CLOEXEC);
  if (s.memfd < 0 || ::ftruncate(s.memfd, static_cast<off_t>(s.arena_bytes)) < 0) Die("memfd");
  void* base = ::mmap(nullptr, s.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.memfd, 0);
  if (base == MAP_FAILED) Die("mmap");
  s.arena = static_cast<std::byte*>(base);
  thread_ = std::thread([this] { Serve(); });
}

FakeServer::~FakeServer() {
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);
  thread_.join();
  ::munmap(state_->arena, state_->arena_bytes);
  ::close(state_->memfd);
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  if (!options_.tcp) ::unlink((dir_ + "/kvtierd.sock").c_str());
  ::rmdir(dir_.c_str());
}

void FakeServer::SetRawReply(std::string command, std::string raw) {
  MutexLock lock(mu_);
  state_->raw_replies[std::move(command)] = std::move(raw);
}

void FakeServer::SetCloseOn(std::string command) {
  MutexLock lock(mu_);
  state_->close_on = std::move(command);
}

std::vector<std::string> FakeServer::commands() const {
  MutexLock lock(mu_);
  return state_->commands;
}

size_t FakeServer::block_count() const {
  MutexLock lock(mu_);
  return state_->blocks.size();
}

}  // namespace kvtier::client::testing

#include "daemon/server/generic_keys_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <vector>

namespace kvtier::server {
namespace {

constexpr std::string_view kMagic("KVTKEYS\x01", 8);

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads little-endian numbers off a byte string; `ok` turns false past its end.
struct Reader {
  std::string_view in;
  bool ok = true;
  uint64_t Take(size_t bytes) {
    if (in.size() < bytes) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
    in.remove_prefix(bytes);
    return v;
  }
  std::string_view Bytes(size_t n) {
    if (in.size() < n) {
      ok = false;
      return {};
    }
    std::string_view out = in.substr(0, n);
    in.remove_prefix(n);
    return out;
  }
};

Status Errno(const std::string& what, const std::string& path) {
  return DeviceError(what + " " + path + ": " + std::strerror(errno));
}

// Makes a rename or removal in the file's directory durable: without it a power cut may bring
// back the old directory entry.
Status SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open", dir);
  const int synced = ::fsync(fd);
  ::close(fd);
  return synced == 0 ? Status::Ok() : Errno("fsync", dir);
}

}  // namespace

Result<size_t> SaveGenericKeys(GenericKeys& keys, const std::string& path) {
  std::string entries;
  size_t count = 0;
  (void)keys.Walk(0, SIZE_MAX,
                  [&](GenericKeys::Stripe&, const BlockKey& key, GenericKeys::Entry& entry) {
                    PutU64(entries, key.high);
                    PutU64(entries, key.low);
                    PutU64(entries, entry.expires_at_ms);
                    PutU32(entries, static_cast<uint32_t>(entry.name.size()));
                    entries.append(entry.name);
                    ++count;
                    return true;
                  });
  std::string out(kMagic);
  PutU64(out, count);
  out.append(entries);
  PutU64(out, XXH3_64bits(out.data(), out.size()));

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open", tmp);
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = Errno("write", tmp);
      ::close(fd);
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status st = Errno("fsync", tmp);
    ::close(fd);
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename to", path);
  KVTIER_RETURN_IF_ERROR(SyncDirectoryOf(path));
  return count;
}

Result<size_t> LoadGenericKeys(GenericKeys& keys, const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    if (errno == ENOENT) return size_t{0};
    return Errno("open", path);
  }
  const std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) return Errno("read", path);
  // Read once: whatever happens next, an older run's names never come back after this one.
  std::remove(path.c_str());
  KVTIER_RETURN_IF_ERROR(SyncDirectoryOf(path));
  auto corrupt = [&](std::string_view why) {
    return Corruption("generic key names " + path + ": " + std::string(why) + "; not used");
  };
  if (data.size() < kMagic.size() + 16 || std::string_view(data).substr(0, 8) != kMagic) {
    return corrupt("not a key-names file of this version");
  }
  Reader tail{std::string_view(data).substr(data.size() - 8)};
  if (tail.Take(8) != XXH3_64bits(data.data(), data.size() - 8)) return corrupt("checksum");
  Reader r{std::string_view(data).substr(8, data.size() - 16)};
  const uint64_t count = r.Take(8);
  struct Loaded {
    BlockKey key;
    uint64_t expires_at_ms;
    std::string_view name;
  };
  std::vector<Loaded> entries;
  for (uint64_t i = 0; i < count && r.ok; ++i) {
    Loaded e;
    e.key.high = r.Take(8);
    e.key.low = r.Take(8);
    e.expires_at_ms = r.Take(8);
    if (e.expires_at_ms > static_cast<uint64_t>(INT64_MAX)) r.ok = false;
    e.name = r.Bytes(r.Take(4));
    entries.push_back(e);
  }
  if (!r.ok || !r.in.empty()) return corrupt("entries do not match the count, or hold bad times");
  for (const Loaded& e : entries) {
    GenericKeys::Stripe& stripe = keys.StripeOf(e.key);
    MutexLock lock(stripe.lock);
    keys.Record(stripe, e.key, e.name, e.expires_at_ms);
  }
  return entries.size();
}

}  // namespace kvtier::server

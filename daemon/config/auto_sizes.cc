// The sizes "auto" resolves to: the host tier's from the memory this process may use, the NVMe
// tier's from the free space where its blocks go (daemon_config.h states the rules). They read
// /proc, /sys/fs/cgroup and the file systems once, at start-up.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "common/units.h"
#include "daemon/config/daemon_config.h"

namespace kvtier::config {

namespace {

// The room where one share of the NVMe tier goes: the free space of the file system holding a
// directory, or the size of a raw block device (which holds nothing else).
struct NvmeRoom {
  std::string where;   // "the file system of /data", "the device /dev/nvme1n1"
  uint64_t fs_id = 0;  // shares on one file system (st_dev) share its free space
  uint64_t available_bytes = 0;  // free space, and what the tier's own files take there
  uint64_t own_bytes = 0;        // of it, the tier's own files (a tier formatted before)
  std::string error;  // why the room could not be measured; empty when it was
};

NvmeRoom DirectoryRoom(std::filesystem::path dir) {
  std::error_code ec;
  while (!dir.empty() && !std::filesystem::exists(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  NvmeRoom room{.where = "the file system of " + dir.string()};
  const std::filesystem::space_info space = std::filesystem::space(dir, ec);
  struct stat st {};
  if (ec || stat(dir.c_str(), &st) != 0) {
    room.error = ec ? ec.message() : std::strerror(errno);
    return room;
  }
  room.fs_id = st.st_dev;
  room.available_bytes = space.available;
  return room;
}

// The bytes the file system holds for `path` (a regular file; 0 when absent), or for the regular
// files under it (a directory).
uint64_t AllocatedBytes(const std::filesystem::path& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_blocks) * 512;
  if (!S_ISDIR(st.st_mode)) return 0;
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_symlink(ec) && it->is_regular_file(ec)) bytes += AllocatedBytes(it->path());
  }
  return bytes;
}

// An nvme.paths entry: a raw block device is measured itself; a file by its directory, where
// its file system's free space is (the file may not exist yet), plus what the file already
// takes: a tier formatted at an earlier start counts its own file as room, or a disk that has
// filled up since would size it at 0 and turn it off, its cached blocks (write-through ones
// included) unread.
NvmeRoom PathRoom(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) {
    NvmeRoom room = DirectoryRoom(std::filesystem::path(path).parent_path());
    if (room.error.empty()) room.own_bytes = AllocatedBytes(path);
    room.available_bytes += room.own_bytes;
    return room;
  }
  NvmeRoom room{.where = "the device " + path, .fs_id = st.st_rdev};
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const off_t size = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);
  if (size < 0) room.error = std::strerror(errno);
  if (fd >= 0) close(fd);
  room.available_bytes = size < 0 ? 0 : static_cast<uint64_t>(size);
  return room;
}

}  // namespace

AutoNvmeSize AutoNvmeBytes(const std::string& data_dir, const std::vector<std::string>& paths) {
  std::vector<NvmeRoom> rooms;
  if (paths.empty()) {
    // The tier's files are in data_dir/nvme: counted as room, as PathRoom counts a path's file.
    NvmeRoom room = DirectoryRoom(data_dir);
    if (room.error.empty())
      room.own_bytes = AllocatedBytes(std::filesystem::path(data_dir) / "nvme");
    room.available_bytes += room.own_bytes;
    rooms.push_back(std::move(room));
  }
  for (const std::string& path : paths) rooms.push_back(PathRoom(path));
  std::map<uint64_t, uint64_t> shares_on;  // fs_id -> how many shares it holds
  for (const NvmeRoom& room : rooms) ++shares_on[room.fs_id];
  // The tier is split equally between its paths, so the tightest share sets every share: each
  // file system gives a tenth of its free space, divided between the shares it holds.
  uint64_t share = UINT64_MAX;
  std::string measured;
  for (const NvmeRoom& room : rooms) {
    if (!room.error.empty()) {
      return {0, "nvme.bytes auto: 0, no NVMe tier: the free space of " + room.where +
                     " cannot be read (" + room.error + ")"};
    }
    share = std::min(share, room.available_bytes / 10 / shares_on[room.fs_id]);
    measured += (measured.empty() ? "" : ", ") + FormatBytes(room.available_bytes) + " free on " +
                room.where;
    if (room.own_bytes > 0)
      measured += " (" + FormatBytes(room.own_bytes) + " of it the tier's own files)";
  }
  const uint64_t bytes =
      std::min<uint64_t>(share * rooms.size(), 16ull << 30) & ~((1ull << 20) - 1);
  const std::string rule =
      rooms.size() == 1
          ? "a tenth of the " + measured
          : "a tenth of the free space of each nvme.paths entry's file system, shared by the "
            "entries on it, the tightest share times " +
                std::to_string(rooms.size()) + " (" + measured + ")";
  if (bytes < (64ull << 20)) {
    return {0, "nvme.bytes auto: 0, no NVMe tier: " + rule +
                   " is under 64MiB (set nvme.bytes to size the tier)"};
  }
  return {bytes, "nvme.bytes auto: " + FormatBytes(bytes) + ", " + rule + ", at most 16GiB"};
}

namespace {

// The first line of `path` as a number; nullopt when absent, unreadable or not a number ("max").
std::optional<uint64_t> ReadNumber(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(text);
}

// The value of `key` in a cgroup's memory.stat ("inactive_file 123"); 0 when absent.
uint64_t StatValue(const std::filesystem::path& stat_file, std::string_view key) {
  std::ifstream in(stat_file);
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

// The room below one cgroup's limit (its limit alone without `usage_file`), for the files of one
// cgroup version. The usage leaves out the inactive file cache (`inactive_file_key` of
// memory.stat), which the kernel reclaims before it goes over the limit, as the kubelet's working
// set does: an engine that read its weights through the page cache has not used that room up.
std::optional<uint64_t> RoomIn(const std::filesystem::path& dir, const char* limit_file,
                               const char* usage_file, std::string_view inactive_file_key) {
  std::optional<uint64_t> limit = ReadNumber(dir / limit_file);
  // cgroup v1 spells "no limit" as a huge number near 2^63.
  if (!limit || *limit >= (1ull << 62)) return std::nullopt;
  uint64_t usage = usage_file == nullptr ? 0 : ReadNumber(dir / usage_file).value_or(0);
  if (usage_file != nullptr)
    usage -= std::min(usage, StatValue(dir / "memory.stat", inactive_file_key));
  return *limit > usage ? *limit - usage : 0;
}

std::optional<uint64_t> CgroupMemory(const std::string& cgroup_root,
                                     const std::string& proc_self_cgroup, bool less_usage) {
  std::optional<uint64_t> room;
  auto take = [&room](std::optional<uint64_t> r) {
    if (r) room = room ? std::min(*room, *r) : *r;
  };
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "0::/system.slice/kvtierd.service" (v2) or "4:memory:/kubepods/pod1/abc" (v1).
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool v2 = line.substr(0, first) == "0" && controllers.empty();
    const bool v1 = controllers.find("memory") != std::string::npos;
    if (!v2 && !v1) continue;
    const std::filesystem::path base =
        v2 ? std::filesystem::path(cgroup_root) : std::filesystem::path(cgroup_root) / "memory";
    // The cgroup and each ancestor up to the root: a limit may sit on a parent (a pod, a slice).
    // Inside a container's cgroup namespace the path is "/" and the root is its own cgroup.
    std::filesystem::path rel = std::filesystem::path(line.substr(second + 1)).relative_path();
    for (;;) {
      take(v2 ? RoomIn(base / rel, "memory.max", less_usage ? "memory.current" : nullptr,
                       "inactive_file")
              : RoomIn(base / rel, "memory.limit_in_bytes",
                       less_usage ? "memory.usage_in_bytes" : nullptr, "total_inactive_file"));
      if (rel.empty()) break;
      rel = rel.parent_path();
    }
  }
  return room;
}

}  // namespace

std::optional<uint64_t> CgroupMemoryRoom(const std::string& cgroup_root,
                                         const std::string& proc_self_cgroup) {
  return CgroupMemory(cgroup_root, proc_self_cgroup, /*less_usage=*/true);
}

std::optional<uint64_t> CgroupMemoryLimit(const std::string& cgroup_root,
                                          const std::string& proc_self_cgroup) {
  return CgroupMemory(cgroup_root, proc_self_cgroup, /*less_usage=*/false);
}

namespace {

// The line `field` of `meminfo` (the text of /proc/meminfo), in bytes (counts as they are).
std::optional<uint64_t> MeminfoBytes(const std::string& meminfo, std::string_view field) {
  std::istringstream lines(meminfo);
  std::string name, unit;
  uint64_t value = 0;
  while (lines >> name >> value) {
    std::getline(lines, unit);
    if (name.size() == field.size() + 1 && name.starts_with(field) && name.back() == ':') {
      return unit.find("kB") != std::string::npos ? value << 10 : value;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> MemAvailableBytes(const std::string& meminfo) {
  return MeminfoBytes(meminfo, "MemAvailable");
}

uint64_t FreeHugePageBytes(const std::string& meminfo) {
  const uint64_t free_pages = MeminfoBytes(meminfo, "HugePages_Free").value_or(0);
  const uint64_t reserved = MeminfoBytes(meminfo, "HugePages_Rsvd").value_or(0);
  return (free_pages - std::min(free_pages, reserved)) *
         MeminfoBytes(meminfo, "Hugepagesize").value_or(0);
}

namespace {

// sysconf's count of pages `name` (_SC_PHYS_PAGES, _SC_AVPHYS_PAGES) in bytes; 0 when unknown.
uint64_t SysconfPageBytes(int name) {
  const long pages = sysconf(name);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : 0;
}

std::string FileText(const char* path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

uint64_t AutoSlabBytes(uint64_t host_bytes) {
  uint64_t slab = uint64_t{64} << 20;
  while (slab > (uint64_t{1} << 20) && host_bytes / slab < kAutoSlabsPerTier) slab /= 2;
  return slab;
}

HostMemory HostMemoryNow(bool with_huge_pages) {
  const std::string info = FileText("/proc/meminfo");
  HostMemory m;
  // Without MemAvailable, free pages alone: the page cache counts as used.
  m.available = MemAvailableBytes(info).value_or(SysconfPageBytes(_SC_AVPHYS_PAGES));
  m.total = MeminfoBytes(info, "MemTotal").value_or(SysconfPageBytes(_SC_PHYS_PAGES));
  const std::string cgroups = FileText("/proc/self/cgroup");
  if (std::optional<uint64_t> room = CgroupMemoryRoom("/sys/fs/cgroup", cgroups)) {
    m.available = std::min(m.available, *room);
  }
  if (std::optional<uint64_t> limit = CgroupMemoryLimit("/sys/fs/cgroup", cgroups)) {
    m.total = std::min(m.total, *limit);
  }
  // A huge-page arena is all huge pages or all normal ones (HostArena): it fits in either.
  if (with_huge_pages) m.available = std::max(m.available, FreeHugePageBytes(info));
  return m;
}

uint64_t AutoHostBytes() {
  return std::clamp<uint64_t>(HostMemoryNow(false).available / 4, 64ull << 20, 64ull << 30);
}

}  // namespace kvtier::config

// SmallFileSystem: a small ext4 file system on a loop device, mounted in a test's directory, for
// tests of what a full file system does (ext4 keeps what a failed posix_fallocate allocated).
//
// Needs root, mkfs.ext4 and a kernel that lets this process mount (a container may not); where
// any is missing, ok() is false and the test skips. Unmounted when the object dies.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace kvtier::tiers::nvme::testing {

class SmallFileSystem {
 public:
  // `dir`: an empty directory of the test's own; the image goes beside the mount point in it.
  SmallFileSystem(const std::string& dir, uint64_t bytes) {
    if (dir.empty() || ::geteuid() != 0) return;
    const std::string image = dir + "/fs.img";
    const std::string mount_point = dir + "/mnt";
    std::error_code ec;
    std::filesystem::create_directories(mount_point, ec);
    if (ec) return;
    const std::string make =
        "truncate -s " + std::to_string(bytes) + " '" + image + "' && mkfs.ext4 -q -F '" + image +
        "' >/dev/null 2>&1 && mount -o loop '" + image + "' '" + mount_point + "' 2>/dev/null";
    if (std::system(make.c_str()) == 0) mount_point_ = mount_point;
  }
  ~SmallFileSystem() {
    if (!mount_point_.empty()) ::umount2(mount_point_.c_str(), MNT_DETACH);
  }
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;

  bool ok() const { return !mount_point_.empty(); }
  // The mounted file system's root.
  const std::string& path() const { return mount_point_; }

 private:
  std::string mount_point_;
};

}  // namespace kvtier::tiers::nvme::testing

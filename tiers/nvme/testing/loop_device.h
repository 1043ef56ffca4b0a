// LoopDevice: a loop block device over a sparse file, for tests of the raw-device path.
//
// Needs root (or CAP_SYS_ADMIN) and losetup; where either is missing, ok() is false and the test
// skips. The device is detached when the object dies.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace kvtier::tiers::nvme::testing {

class LoopDevice {
 public:
  LoopDevice(const std::string& backing_file, uint64_t bytes) {
    int fd = ::open(backing_file.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0) return;
    bool sized = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    ::close(fd);
    if (!sized || ::geteuid() != 0) return;
    std::string cmd = "losetup -f --show '" + backing_file + "' 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return;
    char line[256] = {};
    if (std::fgets(line, sizeof(line), p) != nullptr) device_ = line;
    if (::pclose(p) != 0) device_.clear();
    while (!device_.empty() && (device_.back() == '\n' || device_.back() == ' ')) {
      device_.pop_back();
    }
  }
  ~LoopDevice() {
    if (device_.empty()) return;
    std::string cmd = "losetup -d '" + device_ + "' 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not detach %s\n", device_.c_str());
  }
  LoopDevice(const LoopDevice&) = delete;
  LoopDevice& operator=(const LoopDevice&) = delete;

  bool ok() const { return !device_.empty(); }
  const std::string& path() const { return device_; }

 private:
  std::string device_;
};

}  // namespace kvtier::tiers::nvme::testing

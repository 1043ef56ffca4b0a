// TempDir: a fresh directory for one test, removed with everything in it when the object dies.
//
// Created under $TMPDIR (or /tmp), which on the build machines is a disk file system that accepts
// O_DIRECT; tests that need to know ask DataFile::direct_io().
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace kvtier::tiers::nvme::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/kvtier-nvme-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvtier::tiers::nvme::testing

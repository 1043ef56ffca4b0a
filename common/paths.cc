#include "common/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace kvtier {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

std::string TmpFallbackDir() { return "/tmp/kvtier-" + std::to_string(getuid()); }

bool InTmpFallbackDir(const std::string& path) { return path.starts_with(TmpFallbackDir() + "/"); }

Status CheckPrivateDirectory(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "lstat " + dir);
  std::string wrong;
  if (!S_ISDIR(st.st_mode)) {
    wrong = "is not a directory";
  } else if (st.st_uid != ::geteuid()) {
    wrong = "belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
            std::to_string(::geteuid()) + ")";
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    wrong = "may be written by other users";
  }
  if (wrong.empty()) return Status::Ok();
  return PermissionDenied(dir + " " + wrong +
                          ": another user could serve or take the KV cache through it; remove it, "
                          "or set XDG_RUNTIME_DIR or name a socket and data directory elsewhere");
}

Status PrepareTmpFallbackDir() {
  const std::string dir = TmpFallbackDir();
  // 0755: others may still reach the socket, as listen.unix_mode and allowed_uids let them.
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "create " + dir);
  }
  return CheckPrivateDirectory(dir);
}

std::string DefaultSocketPath() {
  std::string runtime = Env("XDG_RUNTIME_DIR");
  if (!runtime.empty()) return runtime + "/kvtier/kvtierd.sock";
  return TmpFallbackDir() + "/kvtierd.sock";
}

std::string DefaultDataDir() {
  if (std::string d = Env("KVTIER_DATA_DIR"); !d.empty()) return d;
  if (std::string d = Env("XDG_STATE_HOME"); !d.empty()) return d + "/kvtier";
  if (getuid() == 0) return "/var/lib/kvtier";
  if (std::string home = Env("HOME"); !home.empty()) return home + "/.local/state/kvtier";
  return TmpFallbackDir() + "/data";
}

}  // namespace kvtier

#include "common/paths.h"

#include <unistd.h>

#include <cstdlib>

namespace kvtier {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

std::string DefaultSocketPath() {
  std::string runtime = Env("XDG_RUNTIME_DIR");
  if (!runtime.empty()) return runtime + "/kvtier/kvtierd.sock";
  return "/tmp/kvtier-" + std::to_string(getuid()) + "/kvtierd.sock";
}

std::string DefaultDataDir() {
  if (std::string d = Env("KVTIER_DATA_DIR"); !d.empty()) return d;
  if (std::string d = Env("XDG_STATE_HOME"); !d.empty()) return d + "/kvtier";
  if (getuid() == 0) return "/var/lib/kvtier";
  if (std::string home = Env("HOME"); !home.empty()) return home + "/.local/state/kvtier";
  return "/tmp/kvtier-" + std::to_string(getuid()) + "/data";
}

}  // namespace kvtier

// HelperProgram: where a test finds the second program it starts (an IPC child, kvtierd).
//
// The build compiles the program's path into the test (KVTIER_IPC_CHILD_PATH, KVTIERD_PATH, ...).
// A copy of the tests moved to another machine (tests/gpu/prepare.sh puts every binary in one
// folder) has no such path, so a program of the same name beside the running test binary comes
// first. Spawn (child_process.h) and SpawnedKvtierd (client/testing/spawned_kvtierd.h) look there
// themselves: a test hands them the built path. Any thread.
#pragma once

#include <unistd.h>

#include <string>
#include <string_view>

namespace kvtier::testing {

inline std::string HelperProgram(std::string_view built_path) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  const size_t slash = built_path.rfind('/');
  if (n > 0 && slash != std::string_view::npos) {
    std::string beside(self, static_cast<size_t>(n));
    beside.resize(beside.rfind('/') + 1);
    beside += built_path.substr(slash + 1);
    if (::access(beside.c_str(), X_OK) == 0) return beside;
  }
  return std::string(built_path);
}

}  // namespace kvtier::testing

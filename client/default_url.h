// The URL clients use when none is given: the daemon's default Unix socket.
//
// The path itself is defined once, in common/paths.h (DefaultSocketPath(): $XDG_RUNTIME_DIR/
// kvtier/kvtierd.sock when XDG_RUNTIME_DIR is set, else /tmp/kvtier-<uid>/kvtierd.sock), which
// kvtierd uses for where it listens; this header only turns it into a URL, so `kvtier`, libkvtier
// and the C ABI find a daemon started with no arguments. Reads the environment: call it before
// starting threads that might change it.
#pragma once

#include <string>

#include "common/paths.h"

namespace kvtier::client {

// "unix://" + kvtier::DefaultSocketPath().
inline std::string DefaultUrl() { return "unix://" + kvtier::DefaultSocketPath(); }

}  // namespace kvtier::client

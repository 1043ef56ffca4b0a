// RaiseOpenFileLimit: lets kvtierd hold as many descriptors as the system allows it.
//
// Every client connection, NVMe file, shared-memory arena and exported GPU pool takes a
// descriptor, and the soft RLIMIT_NOFILE that a shell or a systemd unit hands down is often 1024:
// far below what the hard limit allows and what a busy daemon needs. Past it, accepts fail with
// EMFILE and clients are turned away while the machine has room. Raising the soft limit to the
// hard one needs no privilege.
//
// Call once at start-up, before threads that open descriptors start.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace kvtier {

// Sets the soft limit on open descriptors to the hard limit. Returns the soft limit now in force.
// Errors: the errno of getrlimit/setrlimit (as ErrnoStatus); the old limit stays, and the caller
// should log it and go on.
Result<uint64_t> RaiseOpenFileLimit();

}  // namespace kvtier

// Passing a file descriptor over a Unix socket (SCM_RIGHTS), for KVT.ATTACH.
//
// The kernel attaches the descriptor to the first byte of the message it rides with; the client's
// recvmsg receives it together with that byte. Pure system-call wrappers; any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/status.h"

namespace kvtier::server {

// Sends a prefix of `bytes` (non-empty) with `fd` attached, without blocking and without SIGPIPE.
// Returns the number of bytes sent (at least 1; the caller sends the rest normally). kBusy when the
// socket buffer is full (wait until writable and call again); otherwise the translated errno.
Result<size_t> SendWithFd(int socket_fd, std::string_view bytes, int fd);

}  // namespace kvtier::server

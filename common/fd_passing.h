// Passing file descriptors over a Unix socket (SCM_RIGHTS), for KVT.ATTACH: the daemon sends the
// arena's memfd (the client tests' FaultProxy relays it), the client receives it.
//
// The kernel attaches a descriptor to the first byte of the message it rides with; the receiver's
// recvmsg gets it together with that byte. Pure system-call wrappers, shared by the daemon and the
// client; any thread.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier {

// Sends a prefix of `bytes` (non-empty) with `fd` attached, without blocking and without SIGPIPE.
// Returns the number of bytes sent (at least 1; the caller sends the rest normally). kBusy when the
// socket buffer is full (wait until writable and call again); otherwise the translated errno.
Result<size_t> SendWithFd(int socket_fd, std::string_view bytes, int fd);

// The descriptors that arrived with SCM_RIGHTS in `msg`, filled in by a recvmsg, oldest first. The
// caller owns them (recvmsg with MSG_CMSG_CLOEXEC to have them close-on-exec). Empty, and nothing
// allocated, when none came.
std::vector<int> TakePassedFds(msghdr& msg);

}  // namespace kvtier

// Passing file descriptors over a Unix socket (SCM_RIGHTS), for KVT.ATTACH: the daemon sends the
// arena's memfd (the client tests' FaultProxy relays it), the client receives it.
//
// The kernel attaches a descriptor to the first byte of the message it rides with; the receiver's
// recvmsg gets it together with that byte. Pure system-call wrappers, shared by the daemon and the
// client; any thread.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <span>
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

// One recvmsg into `buffer` that also takes the descriptors that came with the bytes (up to
// kMaxPassedFds per call, close-on-exec), appended to `fds`; `flags` are recvmsg's (MSG_DONTWAIT).
// Returns recvmsg's result: the bytes read, 0 at end of stream, -1 with errno set (EINTR retried).
inline constexpr size_t kMaxPassedFds = 4;
ssize_t ReceiveWithFds(int socket_fd, std::span<char> buffer, int flags, std::vector<int>& fds);

}  // namespace kvtier

// Probes of the addresses a server is about to listen on: each is bound (and listened on) the way
// the server binds it, then let go at once.
//
// kvtierd probes its Unix socket, TCP and HTTP addresses before it locks its data directory and
// opens its tiers: the server can bind only once the store exists (it serves the store), and the
// NVMe tier preallocates its file when it opens, so a port in use found at bind time left that
// file (gigabytes) behind. The probe cannot reserve the address: a process that takes it between
// the probe and the real bind still fails the start then, as it did before. No threads; call from
// the owner's thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::server {

// Binds the Unix socket `path` as OpenUnixListener does (replacing a stale socket file nobody
// listens on), then closes it and removes the file. Errors as OpenUnixListener's: kBusy when a
// server listens there, kInvalidArgument for a path too long or not a socket, bind errors.
Status ProbeUnixListener(const std::string& path, uint32_t mode);

// Binds host:port as OpenTcpListener does (host: an IP literal or "localhost"; port 0 is not
// probed, the kernel picks one), then closes it. Errors name the address ("tcp 127.0.0.1:6380:
// bind: Address already in use").
Status ProbeTcpListener(const std::string& host, uint16_t port);

}  // namespace kvtier::server

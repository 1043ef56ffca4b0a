// TLS for the remote store's connections (rediss://): the options an operator gives, and the one
// client context every connection of a client shares.
//
// The nodes' certificates are verified against `ca_file` (or the system's default CA paths) and
// against a name: `server_name` when set (a cluster whose nodes, announced by IP address, share a
// certificate for one DNS name, as managed services do), else the host each node is reached at,
// a name or an IP address (the certificate's subjectAltName must hold it). A client certificate is
// sent when the servers ask for one (tls-auth-clients). Pure function; any thread.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "tiers/remote/asio.h"

namespace kvtier::tiers::remote {

struct TlsOptions {
  bool enabled = false;
  std::string ca_file;      // PEM CA certificates; empty: the system's default paths
  std::string cert_file;    // PEM client certificate (with key_file), or empty
  std::string key_file;     // its PEM private key
  std::string server_name;  // the name every node's certificate must carry; empty: its host
};

// A TLS 1.2+ client context that verifies the peer, loaded from the files of `options`.
// kInvalidArgument naming the file (and OpenSSL's reason) for one that cannot be read or parsed,
// or for a certificate without its key.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(const TlsOptions& options);

}  // namespace kvtier::tiers::remote

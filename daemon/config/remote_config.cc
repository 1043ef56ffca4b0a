// Validation of the remote.* keys: the remote tier's seed list, credentials, TLS and timeouts.
#include "daemon/config/daemon_config.h"
#include "tiers/remote/redis_endpoint.h"

namespace kvtier::config {

Status FinalizeRemote(DaemonConfig& config) {
  if (config.remote_url.empty()) {
    // Credentials without a cluster are almost certainly a config mistake (a url lost in a merge);
    // say so rather than run without the tier the operator meant to have.
    if (!config.remote_user.empty() || !config.remote_password.empty()) {
      return InvalidArgument(
          "remote.url: not set, but remote.user or a password is (--remote URL)");
    }
    return Status::Ok();
  }
  Result<tiers::remote::RemoteUrl> url = tiers::remote::ParseRemoteUrl(config.remote_url);
  if (!url.ok()) return InvalidArgument("remote.url: " + url.status().message());
  if (!url->user.empty() && !config.remote_user.empty() && url->user != config.remote_user) {
    return InvalidArgument("remote.user: '" + config.remote_user + "' differs from the URL's '" +
                           url->user + "'; give the user once");
  }
  if (config.remote_user.empty()) config.remote_user = url->user;
  // TLS files for a plain URL: the operator believes the traffic is encrypted; it would not be.
  const bool tls_keys =
      !config.remote_tls_ca_file.empty() || !config.remote_tls_cert_file.empty() ||
      !config.remote_tls_key_file.empty() || !config.remote_tls_server_name.empty();
  if (tls_keys && !url->tls) {
    return InvalidArgument(
        "remote.url: remote.tls_* is set but the URL is not rediss:// (TLS would be off)");
  }
  if (config.remote_tls_cert_file.empty() != config.remote_tls_key_file.empty()) {
    return InvalidArgument(
        "remote.tls_cert_file: a client certificate needs remote.tls_key_file, and a key its "
        "certificate");
  }
  if (config.remote_ttl_seconds == 0)
    return InvalidArgument("remote.ttl_seconds: must be positive");
  if (config.remote_lookup_timeout_ms == 0) {
    return InvalidArgument("remote.lookup_timeout_ms: must be positive");
  }
  if (config.remote_timeout_ms == 0) return InvalidArgument("remote.timeout_ms: must be positive");
  // A timeout between the two is held against a node, a lookup's is not (OpenRemote's
  // shortest_judged_timeout): in the other order a slow node would be judged by its lookups only.
  if (config.remote_lookup_timeout_ms >= config.remote_timeout_ms) {
    return InvalidArgument("remote.lookup_timeout_ms: must be below remote.timeout_ms (" +
                           std::to_string(config.remote_lookup_timeout_ms) +
                           " >= " + std::to_string(config.remote_timeout_ms) +
                           "): a lookup waits on a request's path, the mover's calls may wait "
                           "longer");
  }
  if (config.remote_connect_timeout_ms == 0) {
    return InvalidArgument("remote.connect_timeout_ms: must be positive");
  }
  return Status::Ok();
}

}  // namespace kvtier::config

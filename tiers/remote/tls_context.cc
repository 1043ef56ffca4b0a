#include "tiers/remote/tls_context.h"

#include <boost/system/system_error.hpp>

namespace kvtier::tiers::remote {

Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return InvalidArgument(
        "remote TLS: a client certificate needs its key, and a key its "
        "certificate (remote.tls_cert_file and remote.tls_key_file)");
  }
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code ec;
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1,
                       ec);
  context->set_verify_mode(asio::ssl::verify_peer, ec);
  if (options.ca_file.empty()) {
    context->set_default_verify_paths(ec);
    if (ec) return InvalidArgument("remote TLS: the system's CA paths: " + ec.message());
  } else {
    context->load_verify_file(options.ca_file, ec);
    if (ec) {
      return InvalidArgument("remote TLS: CA file '" + options.ca_file + "': " + ec.message());
    }
  }
  if (!options.cert_file.empty()) {
    context->use_certificate_chain_file(options.cert_file, ec);
    if (ec) {
      return InvalidArgument("remote TLS: certificate file '" + options.cert_file +
                             "': " + ec.message());
    }
    context->use_private_key_file(options.key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return InvalidArgument("remote TLS: key file '" + options.key_file + "': " + ec.message());
    }
  }
  return context;
}

}  // namespace kvtier::tiers::remote

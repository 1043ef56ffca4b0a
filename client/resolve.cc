#include "client/resolve.h"

namespace kvtier::client {
namespace {

Status ResolveError(const std::string& host, int rc) {
  return NotFound("cannot resolve '" + host + "': " + ::gai_strerror(rc));
}

Result<AddrInfoList> ResolveHere(const std::string& host, const std::string& port,
                                 const AddrInfoFunction& resolve) {
  const addrinfo hints = StreamHints(AI_NUMERICSERV);
  addrinfo* list = nullptr;
  const int rc = resolve(host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) return ResolveError(host, rc);
  return AddrInfoList(list);
}

}  // namespace

Result<AddrInfoList> ResolveStream(const std::string& host, uint16_t port,
                                   std::chrono::milliseconds timeout,
                                   const AddrInfoFunction& resolve) {
  const std::string service = std::to_string(port);
  // An address needs no resolver (and no thread): AI_NUMERICHOST never touches the network.
  const addrinfo numeric = StreamHints(AI_NUMERICHOST | AI_NUMERICSERV);
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), service.c_str(), &numeric, &list) == 0) return AddrInfoList(list);
  if (timeout.count() <= 0) return ResolveHere(host, service, resolve);

  Result<std::shared_ptr<HostLookup>> lookup = HostLookup::Start(host, service, resolve);
  if (!lookup.ok()) {
    if (lookup.status().code() == StatusCode::kBusy) return lookup.status();
    // No thread to be had (a process at its thread limit): resolve here, unbounded as before,
    // rather than fail a connect that the resolver may answer at once.
    return ResolveHere(host, service, resolve);
  }
  if (!(*lookup)->WaitFor(timeout)) {
    return Timeout("resolving '" + host + "' took more than " + std::to_string(timeout.count()) +
                   " ms (is the DNS server reachable? an address instead of a name avoids it)");
  }
  std::optional<HostLookup::Answer> answer = (*lookup)->Take();
  if (answer->rc != 0) return ResolveError(host, answer->rc);
  return std::move(answer->list);
}

}  // namespace kvtier::client

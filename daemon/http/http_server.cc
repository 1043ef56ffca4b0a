#include "daemon/http/http_server.h"

#include <pthread.h>

// clang-format off: sorting would move it after Boost, which it must precede
#include "common/asio_coro.h"  // first: fixes Boost 1.74 coroutines on this toolchain
// clang-format on

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <exception>

#include "common/accept_backoff.h"
#include "common/listen_host.h"

namespace kvtier::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Response = bhttp::response<bhttp::string_body>;

constexpr auto kRequestTimeout = std::chrono::seconds(10);
constexpr uint32_t kMaxRequestBytes = 16 * 1024;
// What a connection beyond kMaxHttpConnections gets before it is closed.
constexpr std::string_view kBusyResponse =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
    "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";

// The page at `path`, or 404. Providers may throw; Respond catches.
void Route(const std::string& path, const HttpProviders& providers, Response& res) {
  if (path == "/metrics") {
    res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = providers.metrics();
  } else if (path == "/stats") {
    res.set(bhttp::field::content_type, "application/json");
    res.body() = providers.stats();
  } else if (path == "/stats/history" && providers.history) {
    res.set(bhttp::field::content_type, "application/json");
    res.body() = providers.history();
  } else if (path == "/healthz") {
    res.set(bhttp::field::content_type, "text/plain");
    if (!providers.serving || providers.serving()) {
      res.body() = "ok\n";
    } else {
      res.result(bhttp::status::service_unavailable);
      res.body() = "starting\n";
    }
  } else if (path == "/") {
    res.set(bhttp::field::content_type, "text/html; charset=utf-8");
    res.body() = DashboardHtml();
  } else {
    res.result(bhttp::status::not_found);
    res.set(bhttp::field::content_type, "text/plain");
    res.body() = "not found; try /metrics, /stats, /stats/history, /healthz or /\n";
  }
}

// A page that cannot be rendered is a 500 for this request; the connection and the server go on.
void InternalError(Response& res, std::string_view why) {
  res.result(bhttp::status::internal_server_error);
  res.set(bhttp::field::content_type, "text/plain");
  res.body() = "could not render this page: " + std::string(why) + "\n";
}

Response Respond(const bhttp::request<bhttp::string_body>& req, const HttpProviders& providers) {
  Response res;
  res.version(req.version());
  res.keep_alive(req.keep_alive());
  res.set(bhttp::field::server, "kvtierd");
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
    res.result(bhttp::status::method_not_allowed);
    res.set(bhttp::field::allow, "GET, HEAD");
    res.body() = "only GET is served\n";
  } else {
    try {
      Route(path, providers, res);
    } catch (const std::exception& e) {
      InternalError(res, e.what());
    } catch (...) {
      InternalError(res, "unknown error");
    }
  }
  res.prepare_payload();
  if (req.method() == bhttp::verb::head) {
    // HEAD: the headers of the GET, Content-Length included, and no body (RFC 9110, 9.3.2). A
    // body here would be read by a keep-alive client as the start of its next response.
    const size_t get_length = res.body().size();
    res.body().clear();
    res.content_length(get_length);
  }
  return res;
}

// Refuses a connection beyond the limit: the 503 fits the empty send buffer of a new socket; a
// client that does not read it just sees the connection close.
void Refuse(tcp::socket socket) {
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.send(asio::buffer(kBusyResponse.data(), kBusyResponse.size()), 0, ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
}

// Frees a connection's place under kMaxHttpConnections when its session ends, however it ends.
class SessionSlot {
 public:
  explicit SessionSlot(int& open) : open_(open) {}
  SessionSlot(const SessionSlot&) = delete;
  SessionSlot& operator=(const SessionSlot&) = delete;
  ~SessionSlot() { --open_; }

 private:
  int& open_;
};

asio::awaitable<void> Session(beast::tcp_stream stream, const HttpProviders& providers,
                              int& open_sessions) {
  const SessionSlot slot(open_sessions);
  beast::flat_buffer buffer;
  beast::error_code ec;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxRequestBytes);
    parser.header_limit(kMaxRequestBytes);
    stream.expires_after(kRequestTimeout);
    co_await bhttp::async_read(stream, buffer, parser,
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    auto res = Respond(parser.get(), providers);
    const bool keep_alive = res.keep_alive();
    stream.expires_after(kRequestTimeout);
    co_await bhttp::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !keep_alive) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

// `open_sessions` is only touched on the server's one thread, so it needs no lock.
asio::awaitable<void> Accept(tcp::acceptor& acceptor, const HttpProviders& providers,
                             int& open_sessions, std::atomic<uint64_t>& failed_accepts) {
  asio::steady_timer backoff(acceptor.get_executor());
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      co_await PauseAfterFailedAccept(backoff, failed_accepts);
      continue;
    }
    if (open_sessions >= kMaxHttpConnections) {
      Refuse(std::move(socket));
      continue;
    }
    ++open_sessions;
    asio::co_spawn(acceptor.get_executor(),
                   Session(beast::tcp_stream(std::move(socket)), providers, open_sessions),
                   asio::detached);
  }
}

}  // namespace

struct HttpServer::Impl {
  // Declared before `io`: the sessions that io's destructor destroys still use both.
  HttpProviders providers;
  int open_sessions = 0;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;
};

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, uint16_t port,
                                                      HttpProviders providers) {
  auto impl = std::make_unique<Impl>();
  impl->providers = std::move(providers);
  if (!impl->providers.failed_accepts) {
    impl->providers.failed_accepts = std::make_shared<std::atomic<uint64_t>>(0);
  }
  const std::string where = "http listener " + host + ":" + std::to_string(port);
  KVTIER_ASSIGN_OR_RETURN(const std::string numeric, ListenAddress(where, host));
  boost::system::error_code ec;
  tcp::endpoint endpoint(asio::ip::make_address(numeric), port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return ErrnoStatus(ec.value(), where);
  const uint16_t bound = impl->acceptor.local_endpoint().port();
  asio::co_spawn(
      impl->io,
      Accept(impl->acceptor, impl->providers, impl->open_sessions, *impl->providers.failed_accepts),
      asio::detached);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    pthread_setname_np(pthread_self(), "kvtier-http");
    raw->io.run();
  });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), bound));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl, uint16_t port)
    : impl_(std::move(impl)), port_(port) {}

HttpServer::~HttpServer() { Stop(); }

uint64_t HttpServer::failed_accepts() const { return impl_->providers.failed_accepts->load(); }

void HttpServer::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace kvtier::http

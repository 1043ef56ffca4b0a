#include "daemon/http/http_server.h"

// clang-format off: sorting would move it after Boost, which it must precede
#include "common/asio_coro.h"  // first: the one way kvtier includes Asio
// clang-format on

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kvtier::http {
namespace {

bool ConnectLoopback(int fd, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

// Sends `request` on the connected `fd`, returns everything the server sent back and closes `fd`.
std::string Exchange(int fd, const std::string& request) {
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  close(fd);
  return out;
}

// Sends one raw HTTP request to 127.0.0.1:port and returns everything the server sent back.
std::string Fetch(uint16_t port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (!ConnectLoopback(fd, port)) {
    close(fd);
    return "";
  }
  return Exchange(fd, request);
}

std::string Get(uint16_t port, const std::string& path) {
  return Fetch(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

TEST(HttpServerTest, ServesMetricsStatsHealthAndDashboard) {
  int stats_calls = 0;
  auto server = HttpServer::Start("127.0.0.1", 0,
                                  {.metrics = [] { return std::string("kvtier_blocks 3\n"); },
                                   .stats = [&] {
                                     ++stats_calls;
                                     return std::string("{\"ok\":true}");
                                   }});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  uint16_t port = (*server)->port();
  ASSERT_NE(port, 0);
  std::string metrics = Get(port, "/metrics");
  EXPECT_NE(metrics.find("200 OK"), std::string::npos);
  EXPECT_NE(metrics.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.find("kvtier_blocks 3"), std::string::npos);
  EXPECT_NE(Get(port, "/stats").find("{\"ok\":true}"), std::string::npos);
  EXPECT_EQ(stats_calls, 1);
  // No history provider: the path is unknown (not /stats with a suffix).
  EXPECT_NE(Get(port, "/stats/history").find("404"), std::string::npos);
  EXPECT_NE(Get(port, "/healthz").find("ok"), std::string::npos);
  EXPECT_NE(Get(port, "/").find("<title>kvtier</title>"), std::string::npos);
  EXPECT_NE(Get(port, "/nope").find("404"), std::string::npos);
  EXPECT_NE(Fetch(port, "POST /stats HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                        "Connection: close\r\n\r\n")
                .find("405"),
            std::string::npos);
  // Garbage is answered or dropped; the server keeps serving.
  Fetch(port, std::string("\x16\x03\x01\x00\x05hello", 10));
  EXPECT_NE(Get(port, "/healthz").find("200 OK"), std::string::npos);
}

// HTTP starts before kvtierd's RESP listeners (it binds first, and the generic key names are read
// in between): /healthz said ok while engines' connections were still refused, and a readiness
// probe sent them there.
TEST(HttpServerTest, HealthzIsUnavailableUntilTheDaemonServes) {
  std::atomic<bool> serving{false};
  auto server = HttpServer::Start("127.0.0.1", 0,
                                  {.metrics = [] { return std::string(); },
                                   .stats = [] { return std::string("{}"); },
                                   .serving = [&] { return serving.load(); }});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string starting = Get((*server)->port(), "/healthz");
  EXPECT_NE(starting.find("503"), std::string::npos) << starting;
  EXPECT_NE(starting.find("starting"), std::string::npos);
  EXPECT_NE(Get((*server)->port(), "/metrics").find("200 OK"), std::string::npos);
  serving = true;
  EXPECT_NE(Get((*server)->port(), "/healthz").find("200 OK"), std::string::npos);
}

TEST(HttpServerTest, ServesTheHistoryAsJson) {
  auto server = HttpServer::Start("127.0.0.1", 0,
                                  {.metrics = [] { return std::string(); },
                                   .stats = [] { return std::string("{}"); },
                                   .history = [] { return std::string("{\"samples\":[]}"); }});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string history = Get((*server)->port(), "/stats/history?since=0");
  EXPECT_NE(history.find("200 OK"), std::string::npos);
  EXPECT_NE(history.find("application/json"), std::string::npos);
  EXPECT_NE(history.find("{\"samples\":[]}"), std::string::npos);
}

// The page must stand alone: an operator's browser may reach the daemon and nothing else.
TEST(HttpServerTest, TheDashboardLoadsNothingFromElsewhere) {
  const std::string& page = DashboardHtml();
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_NE(page.find("/stats/history"), std::string::npos);
}

HttpProviders Pages() {
  return {.metrics = [] { return std::string("kvtier_blocks 3\n"); },
          .stats = [] { return std::string("{}"); }};
}

// Regression: a provider that threw (the JSON encoder on a label that is not UTF-8) ended the
// connection without a reply; curl saw an empty reply and a dashboard nothing at all.
TEST(HttpServerTest, AProviderThatThrowsIsA500AndTheServerGoesOn) {
  HttpProviders pages = Pages();
  pages.stats = []() -> std::string { throw std::runtime_error("label is not UTF-8"); };
  auto server = HttpServer::Start("127.0.0.1", 0, pages);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  const std::string reply = Get(port, "/stats");
  EXPECT_NE(reply.find("500 Internal Server Error"), std::string::npos) << reply;
  EXPECT_NE(reply.find("could not render this page: label is not UTF-8\n"), std::string::npos);
  // A keep-alive client gets its next answer on the same connection.
  const std::string two = Fetch(port,
                                "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n"
                                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(two.find("500 Internal"), std::string::npos) << two;
  EXPECT_NE(two.find("200 OK"), std::string::npos) << two;
}

// Regression: HEAD got the GET's body, which curl -I reported as excess and a keep-alive client
// read as the start of its next response.
TEST(HttpServerTest, HeadGetsTheHeadersOfTheGetAndNoBody) {
  auto server = HttpServer::Start("127.0.0.1", 0, Pages());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  const std::string head =
      Fetch(port, "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(head.find("200 OK"), std::string::npos) << head;
  EXPECT_NE(head.find("Content-Length: 3\r\n"), std::string::npos) << head;  // "ok\n"
  ASSERT_GE(head.size(), 4u);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;
  const std::string page = Fetch(port, "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(page.find("Content-Length: " + std::to_string(DashboardHtml().size()) + "\r\n"),
            std::string::npos)
      << page;
  EXPECT_EQ(page.find("<title>"), std::string::npos);
  // HEAD then GET on one connection: the second response follows the first headers directly.
  const std::string two = Fetch(port,
                                "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const size_t first_end = two.find("\r\n\r\n");
  ASSERT_NE(first_end, std::string::npos) << two;
  EXPECT_EQ(two.substr(first_end + 4, 15), "HTTP/1.1 200 OK") << two;
  EXPECT_TRUE(two.ends_with("\r\n\r\nok\n")) << two;
}

// Regression: every connection was served, however many, each holding a descriptor for up to
// the request timeout.
TEST(HttpServerTest, ConnectionsBeyondTheLimitAreRefusedUntilOneCloses) {
  auto server = HttpServer::Start("127.0.0.1", 0, Pages());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  std::vector<int> idle;
  for (int i = 0; i < kMaxHttpConnections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_TRUE(ConnectLoopback(fd, port));
    idle.push_back(fd);
  }
  // Accepted after the idle ones (the listen queue is first in, first out), so over the limit:
  // answered 503, or closed before the answer is read, but never served.
  const std::string refused = Get(port, "/healthz");
  EXPECT_EQ(refused.find("200 OK"), std::string::npos) << refused;
  if (!refused.empty()) EXPECT_NE(refused.find("503"), std::string::npos) << refused;
  close(idle.back());
  idle.pop_back();
  // The freed place is taken once the server has seen the close: poll for that.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string served;
  while (served.find("200 OK") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    served = Get(port, "/healthz");
  }
  EXPECT_NE(served.find("200 OK"), std::string::npos) << served;
  for (int fd : idle) close(fd);
}

// Descriptors of this process, used up to the soft limit until destroyed (which gives them back
// and restores the limit).
class DescriptorsExhausted {
 public:
  DescriptorsExhausted() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit low = saved_;
    // A low limit bounds how many descriptors it takes; those already open stay usable.
    if (low.rlim_cur > 512) low.rlim_cur = 512;
    setrlimit(RLIMIT_NOFILE, &low);
    for (;;) {
      const int fd = dup(STDERR_FILENO);
      if (fd < 0) break;
      taken_.push_back(fd);
    }
  }
  ~DescriptorsExhausted() {
    for (int fd : taken_) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  rlimit saved_{};
  std::vector<int> taken_;
};

// Regression: out of descriptors (EMFILE), the accept loop retried at once, forever: a queued
// connection keeps the listener readable, so the HTTP thread burned a core while nothing was
// served.
TEST(HttpServerTest, AnAcceptThatFailsIsRetriedAfterAPauseNotAtOnce) {
  // Counted where the daemon's /metrics reads it (kvtierd passes a counter of its own).
  HttpProviders pages = Pages();
  pages.failed_accepts = std::make_shared<std::atomic<uint64_t>>(0);
  const auto counted = pages.failed_accepts;
  auto server = HttpServer::Start("127.0.0.1", 0, std::move(pages));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // Before the descriptors run out: the accept loop has started (its pause timer made), and a
  // timer has waited once in this process. UBSan checks a polymorphic object's type the first
  // time it meets it with a pipe, which fails without descriptors, and then reports a valid
  // object as one with an invalid vptr.
  ASSERT_NE(Get((*server)->port(), "/healthz").find("200 OK"), std::string::npos);
  {
    boost::asio::io_context io;
    boost::asio::steady_timer timer(io, std::chrono::milliseconds(1));
    timer.async_wait([](const boost::system::error_code&) {});
    io.run();
  }
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  {
    DescriptorsExhausted exhausted;
    ASSERT_TRUE(ConnectLoopback(client, (*server)->port()));  // queued; accept has no descriptor
    // The loop has failed once; then, over half a second, it may fail at most once per pause
    // (10 times, and fewer if the thread is slow to run). Retrying at once fails thousands of
    // times in that window: the count, not a clock, tells the two apart.
    for (int i = 0; i < 1000 && (*server)->failed_accepts() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const uint64_t first = (*server)->failed_accepts();
    ASSERT_GT(first, 0u) << "the queued connection was never tried";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_LE((*server)->failed_accepts() - first, 20u) << "the accept loop spins";
    EXPECT_EQ(counted->load(), (*server)->failed_accepts());
  }
  // Descriptors are back: the queued connection is accepted and served.
  const std::string reply =
      Exchange(client, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
}

TEST(HttpServerTest, BadAddressesAreNamed) {
  auto r = HttpServer::Start("not-an-ip", 0, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not-an-ip"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::http

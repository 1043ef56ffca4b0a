#include "client/endpoint.h"

#include <gtest/gtest.h>

#include <string>

#include "client/default_url.h"

namespace kvtier::client {
namespace {

TEST(EndpointTest, ParsesUnixUrls) {
  Result<Endpoint> e = ParseUrl("unix:///run/user/1000/kvtier/kvtierd.sock");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->is_unix());
  EXPECT_EQ(e->path, "/run/user/1000/kvtier/kvtierd.sock");
  EXPECT_EQ(e->url, "unix:///run/user/1000/kvtier/kvtierd.sock");
}

TEST(EndpointTest, ParsesTcpUrls) {
  Result<Endpoint> v4 = ParseUrl("tcp://127.0.0.1:6379");
  ASSERT_TRUE(v4.ok());
  EXPECT_FALSE(v4->is_unix());
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 6379);

  Result<Endpoint> name = ParseUrl("tcp://cache-node-3:65535");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->host, "cache-node-3");
  EXPECT_EQ(name->port, 65535);

  Result<Endpoint> v6 = ParseUrl("tcp://[::1]:7000");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7000);
}

// Every rejection names the URL, so a typo in a config file is found at once.
TEST(EndpointTest, BadUrlsAreInvalidAndNamed) {
  const std::string too_long = "unix:///" + std::string(kMaxUnixPathBytes, 'x');
  for (const std::string& url :
       {std::string("http://localhost:80"), std::string("localhost:6379"), std::string("unix://"),
        std::string("tcp://localhost"), std::string("tcp://:6379"), std::string("tcp://host:"),
        std::string("tcp://host:0"), std::string("tcp://host:65536"), std::string("tcp://host:12x"),
        std::string("tcp://host:80/path"), std::string("tcp://::1:80"), std::string("tcp://[::1:80"),
        std::string("tcp://[::1]"), std::string(""), too_long}) {
    Result<Endpoint> e = ParseUrl(url);
    ASSERT_FALSE(e.ok()) << url;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(e.status().message().find("'" + url + "'"), std::string::npos) << e.status().message();
  }
}

TEST(EndpointTest, UnixPathAtTheKernelLimitIsAccepted) {
  EXPECT_TRUE(ParseUrl("unix://" + std::string(kMaxUnixPathBytes, 'x')).ok());
}

TEST(DefaultUrlTest, UsesXdgRuntimeDirWhenSet) {
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string restore = saved == nullptr ? "" : saved;
  ::setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  EXPECT_EQ(DefaultUrl(), "unix:///run/user/4242/kvtier/kvtierd.sock");
  ::setenv("XDG_RUNTIME_DIR", "", 1);
  EXPECT_EQ(DefaultUrl(), "unix:///tmp/kvtier-" + std::to_string(::getuid()) + "/kvtierd.sock");
  ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(DefaultUrl(), "unix:///tmp/kvtier-" + std::to_string(::getuid()) + "/kvtierd.sock");
  if (saved != nullptr) ::setenv("XDG_RUNTIME_DIR", restore.c_str(), 1);
  EXPECT_TRUE(ParseUrl(DefaultUrl()).ok());
}

}  // namespace
}  // namespace kvtier::client

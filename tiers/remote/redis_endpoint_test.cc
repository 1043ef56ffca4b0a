#include "tiers/remote/redis_endpoint.h"

#include <gtest/gtest.h>

namespace kvtier::tiers::remote {
namespace {

TEST(RedisEndpoint, ParsesHostPortAndIpv6) {
  const auto a = ParseHostPort("127.0.0.1:7000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7000);
  const auto b = ParseHostPort("[::1]:6379");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->ToString(), "[::1]:6379");
}

TEST(RedisEndpoint, RefusesBadEntries) {
  for (const char* bad :
       {"", "host", "host:", ":7000", "host:0", "host:65536", "host:7x", "::1:7", "[::1]7000"}) {
    EXPECT_EQ(ParseHostPort(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(RedisEndpoint, ParsesSeedListWithAndWithoutScheme) {
  const auto plain = ParseRemoteUrl("a:1,b:2");
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->seeds.size(), 2u);
  EXPECT_EQ(plain->seeds[1].ToString(), "b:2");
  EXPECT_TRUE(plain->user.empty());
  const auto url = ParseRemoteUrl("redis://kv@a:1,[::1]:2");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->user, "kv");
  ASSERT_EQ(url->seeds.size(), 2u);
  EXPECT_EQ(url->seeds[1].host, "::1");
}

TEST(RedisEndpoint, RefusesPasswordInUrlWithoutRepeatingIt) {
  const Status st = ParseRemoteUrl("redis://kv:s3cret@a:1").status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().find("s3cret"), std::string::npos);
  EXPECT_NE(st.message().find("KVTIER_REMOTE_PASSWORD"), std::string::npos);
}

TEST(RedisEndpoint, RedissAsksForTls) {
  const auto tls = ParseRemoteUrl("rediss://kv@a:1,b:2");
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->user, "kv");
  EXPECT_EQ(tls->seeds.size(), 2u);
  EXPECT_FALSE(ParseRemoteUrl("redis://a:1")->tls);
  EXPECT_FALSE(ParseRemoteUrl("a:1")->tls);
}

TEST(RedisEndpoint, RefusesOtherSchemesAndEmptyLists) {
  EXPECT_FALSE(ParseRemoteUrl("http://a:1").ok());
  EXPECT_FALSE(ParseRemoteUrl("redis+tls://a:1").ok());
  EXPECT_FALSE(ParseRemoteUrl("redis://").ok());
  EXPECT_FALSE(ParseRemoteUrl("a:1,").ok());
  EXPECT_FALSE(ParseRemoteUrl("@a:1").ok());
}

}  // namespace
}  // namespace kvtier::tiers::remote

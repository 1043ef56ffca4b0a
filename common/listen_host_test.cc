#include "common/listen_host.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(ListenHostTest, AddressesAreTakenAsWritten) {
  for (const std::string host : {"127.0.0.1", "0.0.0.0", "10.1.2.3", "::", "::1", "fe80::1"}) {
    Result<std::string> address = ListenAddress("listen.tcp_host", host);
    ASSERT_TRUE(address.ok()) << host << ": " << address.status().ToString();
    EXPECT_EQ(*address, host);
  }
}

TEST(ListenHostTest, LocalhostIsTheIpv4LoopbackAddress) {
  Result<std::string> address = ListenAddress("listen.http_host", "localhost");
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(*address, "127.0.0.1");
}

// A listener binds an address: a name would need a resolver at start, so it is refused, and the
// message names the setting and the host.
TEST(ListenHostTest, NamesAndMalformedAddressesAreRefusedWithTheSetting) {
  for (const std::string host : {"example.com", "", "1.2.3", "256.0.0.1", "::g", "LOCALHOST"}) {
    Result<std::string> address = ListenAddress("listen.tcp_host", host);
    ASSERT_FALSE(address.ok()) << host;
    EXPECT_EQ(address.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(address.status().message().find("listen.tcp_host: '" + host + "'"), std::string::npos)
        << address.status().message();
  }
}

TEST(ListenHostTest, LoopbackAddresses) {
  for (const std::string host :
       {"localhost", "127.0.0.1", "127.255.0.9", "::1", "0:0:0:0:0:0:0:1"}) {
    EXPECT_TRUE(IsLoopbackAddress(host)) << host;
  }
  for (const std::string host : {"0.0.0.0", "128.0.0.1", "10.0.0.1", "::", "::2", "name"}) {
    EXPECT_FALSE(IsLoopbackAddress(host)) << host;
  }
}

}  // namespace
}  // namespace kvtier

#include "daemon/server/listen_probe.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvtier::server {
namespace {

// A TCP socket listening on a loopback port the kernel picked: an address in use.
class TakenPort {
 public:
  TakenPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), length), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~TakenPort() { close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(ListenProbeTest, APortInUseIsFoundAndAFreeOneIsLeftFree) {
  uint16_t port = 0;
  {
    TakenPort taken;
    port = taken.port();
    const Status st = ProbeTcpListener("127.0.0.1", port);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("in use"), std::string::npos) << st.ToString();
  }
  // Free now: the probe binds it and lets go, so a second probe (the server) binds it too.
  EXPECT_TRUE(ProbeTcpListener("127.0.0.1", port).ok());
  EXPECT_TRUE(ProbeTcpListener("localhost", port).ok());
  EXPECT_TRUE(ProbeTcpListener("127.0.0.1", 0).ok());  // the kernel picks one: nothing to probe
}

TEST(ListenProbeTest, AUnixProbeLeavesNoSocketFile) {
  const std::string dir = ::testing::TempDir() + "/listen-probe";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/k.sock";
  ASSERT_TRUE(ProbeUnixListener(path, 0660).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  // Something that is not a socket is refused, and left alone.
  const std::string file = dir + "/not-a-socket";
  std::filesystem::create_directories(file);
  EXPECT_EQ(ProbeUnixListener(file, 0660).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_directory(file));
  EXPECT_FALSE(ProbeUnixListener(dir + "/no-such-dir/k.sock", 0660).ok());
}

}  // namespace
}  // namespace kvtier::server

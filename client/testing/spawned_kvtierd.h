// SpawnedKvtierd: a real kvtierd process for a client test suite, on a scratch Unix socket with a
// 64 MiB host tier, no NVMe tier and no TCP or HTTP listener, in a fresh directory under /tmp.
//
// Start from SetUpTestSuite and Stop from TearDownTestSuite; both report through gtest
// assertions. Start waits (up to 20 s) until the daemon answers PING: starting a process has no
// completion to wait on, so it polls the socket. Stop sends SIGTERM, expects a clean exit and
// removes the directory. Not thread-safe: one suite's set-up and tear-down.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"

extern char** environ;

namespace kvtier::client::testing {

class SpawnedKvtierd {
 public:
  // `kvtierd_path`: the binary (tests get it as KVTIERD_PATH); `name` appears in the directory.
  // The daemon runs on host memory alone (no NVMe, no GPU tier), whatever the machine has.
  void Start(const std::string& kvtierd_path, const std::string& name) {
    std::string dir_template = "/tmp/kvtier-" + name + "-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template.data()), nullptr);
    dir_ = dir_template;
    url_ = "unix://" + dir_ + "/kvtierd.sock";
    std::vector<std::string> args = {kvtierd_path,
                                     "--unix",
                                     dir_ + "/kvtierd.sock",
                                     "--port",
                                     "0",
                                     "--http-port",
                                     "0",
                                     "--host-bytes",
                                     "64MiB",
                                     "--data-dir",
                                     dir_ + "/data",
                                     "--nvme-bytes",
                                     "0",
                                     "--gpu-bytes",
                                     "0"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      Result<Client> probe = Client::Connect(url_);
      if (probe.ok() && probe->Ping().ok()) return;
      int status = 0;
      ASSERT_EQ(::waitpid(pid_, &status, WNOHANG), 0) << "kvtierd exited during start-up";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "kvtierd did not accept on " << url_;
  }

  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "kvtierd status " << status;
      pid_ = -1;
    }
    if (!dir_.empty()) {
      const std::string cmd = "rm -rf '" + dir_ + "'";
      EXPECT_EQ(std::system(cmd.c_str()), 0);
    }
  }

  const std::string& url() const { return url_; }

 private:
  std::string dir_;
  std::string url_;
  pid_t pid_ = -1;
};

// Registers a namespace of one-byte-per-element test blocks (16 tokens each, `block_bytes` long)
// named "<prefix>/<current test name>", so every test gets blocks of its own.
inline Result<NamespaceInfo> RegisterTestNamespace(Client& client, const std::string& prefix,
                                                   size_t block_bytes) {
  hashing::NamespaceDescriptor d;
  d.model_id = prefix + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  d.kv_dtype = "int8";
  d.num_layers = d.num_kv_heads = d.head_dim = 1;
  d.tokens_per_block = 16;
  d.layout_tag = "test";
  return client.RegisterNamespace(d, block_bytes);
}

// Chained keys of `n` full blocks of distinct tokens derived from `seed`.
inline std::vector<BlockKey> TestKeys(const NamespaceInfo& ns, size_t n, uint32_t seed) {
  std::vector<uint32_t> tokens(n * ns.tokens_per_block);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = seed * 1000003u + static_cast<uint32_t>(i);
  }
  return *Client::HashTokens(ns, tokens);
}

}  // namespace kvtier::client::testing

// SpawnedKvtierd: a real kvtierd process for a client test, on a scratch Unix socket with a
// 64 MiB host tier, no NVMe tier, no GPU tier and no TCP or HTTP listener, in a fresh directory
// under /tmp. A test may change any of that: extra flags replace the default of the same flag or
// add to them, and a YAML text becomes the daemon's --config (flags override its values).
//
// Start from SetUpTestSuite (or a test) and Stop from TearDownTestSuite (or TearDown); both
// report through gtest assertions. Start waits (up to 20 s) until the daemon answers PING:
// starting a process has no completion to wait on, so it polls the socket. The daemon's output
// goes to kvtierd.log in its directory (Log()), and is printed by Stop when a test failed.
// Terminate and WaitForExit let a test watch the daemon shut down; Stop sends SIGTERM if it still
// runs, expects a clean exit and removes the directory. Not thread-safe: one test's or suite's
// set-up and tear-down.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/fakes/helper_program.h"

extern char** environ;

namespace kvtier::client::testing {

class SpawnedKvtierd {
 public:
  SpawnedKvtierd() = default;
  SpawnedKvtierd(const SpawnedKvtierd&) = delete;
  SpawnedKvtierd& operator=(const SpawnedKvtierd&) = delete;
  // A test that ended before Stop (a fatal assertion) leaves no daemon behind.
  ~SpawnedKvtierd() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // `kvtierd_path`: the binary as built (tests get it as KVTIERD_PATH; a kvtierd beside the test
  // binary comes first: HelperProgram); `name` appears in the directory.
  // `flags`: "--flag value" pairs (or a lone "--flag") that replace the default value of the same
  // flag (--gpu-bytes 16MiB turns a GPU tier on) or are added. `config_yaml`: when not empty,
  // written to kvtierd.yaml in the directory and passed as --config.
  void Start(const std::string& kvtierd_path, const std::string& name,
             const std::vector<std::string>& flags = {}, const std::string& config_yaml = "") {
    std::string dir_template = "/tmp/kvtier-" + name + "-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template.data()), nullptr);
    dir_ = dir_template;
    url_ = "unix://" + dir_ + "/kvtierd.sock";
    std::vector<std::pair<std::string, std::string>> options = {{"--unix", dir_ + "/kvtierd.sock"},
                                                                {"--port", "0"},
                                                                {"--http-port", "0"},
                                                                {"--host-bytes", "64MiB"},
                                                                {"--data-dir", dir_ + "/data"},
                                                                {"--nvme-bytes", "0"},
                                                                {"--gpu-bytes", "0"}};
    if (!config_yaml.empty()) {
      std::ofstream(dir_ + "/kvtierd.yaml") << config_yaml;
      options.emplace_back("--config", dir_ + "/kvtierd.yaml");
    }
    for (size_t i = 0; i < flags.size(); ++i) {
      const bool has_value = i + 1 < flags.size() && flags[i + 1].rfind("--", 0) != 0;
      const std::string value = has_value ? flags[i + 1] : "";
      auto same = std::find_if(options.begin(), options.end(),
                               [&](const auto& o) { return o.first == flags[i]; });
      if (same != options.end()) {
        same->second = value;
      } else {
        options.emplace_back(flags[i], value);
      }
      if (has_value) ++i;
    }
    std::vector<std::string> args = {::kvtier::testing::HelperProgram(kvtierd_path)};
    for (const auto& [flag, value] : options) {
      args.push_back(flag);
      if (!value.empty()) args.push_back(value);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    ASSERT_EQ(::posix_spawn_file_actions_init(&actions), 0);
    const std::string log_path = dir_ + "/kvtierd.log";
    ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                       O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    const int spawned = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(spawned, 0) << "cannot start " << args[0];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      Result<Client> probe = Client::Connect(url_);
      if (probe.ok() && probe->Ping().ok()) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL() << "kvtierd exited during start-up (status " << status << "):\n" << Log();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "kvtierd did not accept on " << url_ << ":\n" << Log();
  }

  // Sends SIGTERM: the daemon starts its shutdown (the GPU pool's importers are told, and waited
  // for up to gpu.detach_timeout_ms).
  void Terminate() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
  }

  // Waits up to `limit` for the daemon to exit and returns its wait status; after `limit` it is
  // killed (SIGKILL), reaped, and the result is empty. A hang guard, not a measurement: waitpid
  // has no timeout, so it runs on a thread of its own.
  std::optional<int> WaitForExit(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return std::nullopt;
    const pid_t pid = pid_;
    std::packaged_task<int()> wait([pid] {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    });
    std::future<int> exited = wait.get_future();
    std::thread waiter(std::move(wait));
    std::optional<int> result;
    if (exited.wait_for(limit) == std::future_status::ready) {
      result = exited.get();
    } else {
      ::kill(pid, SIGKILL);
    }
    waiter.join();
    pid_ = -1;
    return result;
  }

  // Everything the daemon printed so far.
  std::string Log() const {
    std::ifstream in(dir_ + "/kvtierd.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  void Stop() {
    if (pid_ > 0) {
      Terminate();
      const std::optional<int> status = WaitForExit(std::chrono::seconds(60));
      EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << "kvtierd exit status " << (status ? std::to_string(*status) : "none: killed");
    }
    if (!dir_.empty()) {
      if (::testing::UnitTest::GetInstance()->failed_test_count() > 0 ||
          ::testing::Test::HasFailure()) {
        std::cerr << "---- " << dir_ << "/kvtierd.log ----\n" << Log() << "---- end of log ----\n";
      }
      const std::string cmd = "rm -rf '" + dir_ + "'";
      EXPECT_EQ(std::system(cmd.c_str()), 0);
      dir_.clear();
    }
  }

  const std::string& url() const { return url_; }
  bool running() const { return pid_ > 0; }

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

// Process-crash test of NvmeTier: a child process writes, reads and frees blocks until the parent
// kills it with SIGKILL at a random moment; the parent reopens the tier and checks that every block
// the child had acknowledged is recovered with its exact bytes and that nothing else is served
// wrong. A process crash loses no completed write (O_DIRECT data is with the device, catalog writes
// are in the OS), so here, unlike after a power cut, no acknowledged block may be missing.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/nvme/testing/temp_dir.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr uint64_t kMiB = 1 << 20;

BlockIdentity Id(uint64_t i) { return {NamespaceId{{9, 9}}, BlockKey{{i, i * 17}}}; }

void Fill(std::span<std::byte> out, uint64_t i) {
  std::mt19937_64 rng(i * 31337 + 7);
  for (size_t k = 0; k < out.size(); k += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + k, &v, std::min<size_t>(8, out.size() - k));
  }
}

NvmeTier::Options Opts(const std::string& dir) {
  NvmeTier::Options o;
  o.data_dir = dir;
  o.capacity_bytes = 16 * kMiB;  // small, so extents are freed and reused all the time
  return o;
}

// Sends one event to the parent: 'R' once the tier is open, 'W' after block i is stored, 'F' before
// it is freed.
void Report(int fd, char what, uint64_t i) {
  char msg[24];
  int n = std::snprintf(msg, sizeof(msg), "%c%lu\n", what, static_cast<unsigned long>(i));
  if (::write(fd, msg, n) != n) ::_exit(3);
}

// The child's whole life: never returns.
[[noreturn]] void ChildLoop(const std::string& dir, int report_fd, uint64_t seed) {
  auto tier = NvmeTier::Open(Opts(dir));
  if (!tier.ok()) ::_exit(2);
  std::map<uint64_t, Extent> live;  // the previous lives' blocks can be freed too
  for (const RecoveredBlock& b : (*tier)->TakeRecovered()) live[b.key.high] = b.extent;
  Report(report_fd, 'R', 0);  // ready: the parent's clock starts now
  std::mt19937_64 rng(seed);
  for (uint64_t step = seed * 100000;; ++step) {
    if (live.size() > 8 && rng() % 3 == 0) {
      auto it = std::next(live.begin(), rng() % live.size());
      Report(report_fd, 'F', it->first);
      (*tier)->Free(it->second);
      live.erase(it);
      continue;
    }
    auto e = (*tier)->Allocate(4096 * (1 + rng() % 48) + rng() % 3 * 1000);
    if (!e.ok()) {
      if (live.empty()) ::_exit(6);
      auto it = live.begin();
      Report(report_fd, 'F', it->first);
      (*tier)->Free(it->second);
      live.erase(it);
      continue;
    }
    AlignedBuffer buf(e->length);
    Fill(buf.span(), step);
    if (!(*tier)->WriteBlock(*e, Id(step), buf.span()).ok()) ::_exit(4);
    live[step] = *e;
    Report(report_fd, 'W', step);
  }
}

// The child is this test binary again, started with exec so that it shares no threads or locks
// with the parent (RocksDB keeps background threads after a database closes; fork alone would copy
// its locks but not its threads). It runs only the ChildProcess test below.
pid_t SpawnChild(const std::string& dir, const int pipefd[2], uint64_t seed) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::close(pipefd[0]);
  ::setenv("KVTIER_CRASH_CHILD_DIR", dir.c_str(), 1);
  ::setenv("KVTIER_CRASH_CHILD_FD", std::to_string(pipefd[1]).c_str(), 1);
  ::setenv("KVTIER_CRASH_CHILD_SEED", std::to_string(seed).c_str(), 1);
  const char* argv[] = {"nvme_tier_crash_test", "--gtest_filter=NvmeTierCrashTest.ChildProcess",
                        nullptr};
  ::execv("/proc/self/exe", const_cast<char* const*>(argv));
  ::_exit(5);
}

// Runs the child's loop when started by SpawnChild; skipped in a normal run.
TEST(NvmeTierCrashTest, ChildProcess) {
  const char* dir = std::getenv("KVTIER_CRASH_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "only runs as the crash test's child";
  ChildLoop(dir, std::atoi(std::getenv("KVTIER_CRASH_CHILD_FD")),
            std::strtoull(std::getenv("KVTIER_CRASH_CHILD_SEED"), nullptr, 10));
}

// Kills and reaps the child when the test leaves a round early, so no child outlives a failure.
struct ChildGuard {
  pid_t pid;
  // SIGKILL now; returns the wait status.
  int Kill() {
    int status = 0;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
  ~ChildGuard() {
    if (pid > 0) Kill();
  }
};

// Consumes the child's first message, "R0": its tier is open.
bool WaitReady(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1) {
    if (c == '\n') return line == "R0";
    line.push_back(c);
  }
  return false;
}

// Reads every event the dead child sent; returns the blocks it had stored and not begun to free.
std::set<uint64_t> Acknowledged(int fd, std::set<uint64_t> live) {
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) all.append(buf, static_cast<size_t>(n));
  size_t pos = 0;
  while (true) {
    size_t nl = all.find('\n', pos);
    if (nl == std::string::npos) break;  // a torn last message: the child died writing it
    uint64_t i = std::stoull(all.substr(pos + 1, nl - pos - 1));
    if (all[pos] == 'W') live.insert(i);
    else live.erase(i);
    pos = nl + 1;
  }
  return live;
}

TEST(NvmeTierCrashTest, KillNineAtRandomMomentsLosesNothingAcknowledged) {
  testing::TempDir dir;
  std::mt19937_64 rng(2024);
  std::set<uint64_t> live;  // acknowledged blocks over all the child's lives
  for (uint64_t round = 1; round <= 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    ChildGuard child{SpawnChild(dir.path(), pipefd, round)};
    ASSERT_GT(child.pid, 0);
    ::close(pipefd[1]);
    ASSERT_TRUE(WaitReady(pipefd[0])) << "the child did not start";
    ::usleep(static_cast<useconds_t>(20000 + rng() % 150000));
    int status = child.Kill();
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited by itself, status " << status;
    live = Acknowledged(pipefd[0], live);
    ::close(pipefd[0]);

    auto tier = NvmeTier::Open(Opts(dir.path()));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    std::set<uint64_t> recovered;
    for (const RecoveredBlock& b : (*tier)->TakeRecovered()) {
      uint64_t i = b.key.high;
      ASSERT_EQ(Id(i).key, b.key);
      AlignedBuffer got(b.extent.length), want(b.extent.length);
      Fill(want.span(), i);
      Status st = (*tier)->ReadBlock(b.extent, Id(i), got.span());
      ASSERT_TRUE(st.ok()) << "block " << i << ": " << st.ToString();
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << "block " << i;
      recovered.insert(i);
    }
    for (uint64_t i : live) EXPECT_TRUE(recovered.count(i)) << "acknowledged block " << i << " lost";
    EXPECT_EQ((*tier)->nvme_stats().dropped_at_recovery, 0u);
    // Blocks recovered beyond the acknowledged ones (stored, acknowledgement not sent; or being
    // freed) are correct blocks too; the next child's life starts from all of them.
    live = recovered;
  }
}

}  // namespace
}  // namespace kvtier::tiers::nvme

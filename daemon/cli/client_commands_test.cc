// ping, stats, bench and replay run against kvtierd's server in the test process.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "client/testing/in_process_daemon.h"
#include "daemon/cli/bench_command.h"
#include "daemon/cli/ping_command.h"
#include "daemon/cli/replay_command.h"
#include "daemon/cli/stats_command.h"

namespace kvtier::cli {
namespace {

using client::testing::InProcessDaemon;

ClientFlags Flags(const InProcessDaemon& server) {
  ClientFlags flags;
  flags.url = server.url();
  flags.timeout_ms = 5000;
  return flags;
}

// Removes a file the test made in the shared temporary folder when the test ends.
struct RemovedAtEnd {
  std::string path;
  ~RemovedAtEnd() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

// The same daemon under a socket path that is not valid UTF-8 (a link to its socket, removed
// when `link` goes), for the reports that echo --url.
std::string Latin1Url(const InProcessDaemon& server, RemovedAtEnd& link) {
  const std::string prefix = "unix://";
  link.path = ::testing::TempDir() + "/kvtierd-caf\xe9.sock";
  std::filesystem::remove(link.path);
  std::filesystem::create_symlink(server.url().substr(prefix.size()), link.path);
  return prefix + link.path;
}

// A bench of `count` 4 KiB blocks against `server`; tests set what they vary.
BenchFlags SmallBench(const InProcessDaemon& server, size_t count) {
  BenchFlags flags;
  flags.client = Flags(server);
  flags.block_bytes = "4KiB";
  flags.count = count;
  return flags;
}

// A replay of tests/data's three requests ([1 2 3] [1 2 4] [1 2 3]) against `server`.
ReplayFlags ThreeRequestReplay(const InProcessDaemon& server, const std::string& block_bytes) {
  ReplayFlags flags;
  flags.client = Flags(server);
  flags.trace_path = std::string(KVTIER_CLI_TESTDATA) + "/three_requests.jsonl";
  flags.block_bytes = block_bytes;
  return flags;
}

TEST(PingCommandTest, AnswersAndFailures) {
  InProcessDaemon server;
  std::ostringstream out, err;
  EXPECT_EQ(RunPing(PingFlags{Flags(server), 3}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("PONG from " + server.url()), std::string::npos);

  PingFlags absent{ClientFlags{"unix:///nonexistent/kvtierd.sock", "", 100}, 1};
  std::ostringstream out2, err2;
  EXPECT_EQ(RunPing(absent, out2, err2), 1);
  EXPECT_NE(err2.str().find("unix:///nonexistent/kvtierd.sock"), std::string::npos) << err2.str();
  PingFlags bad_url{ClientFlags{"http://x", "", 100}, 1};
  EXPECT_EQ(RunPing(bad_url, out2, err2), 1);
  EXPECT_NE(err2.str().find("'http://x'"), std::string::npos) << err2.str();
}

TEST(StatsCommandTest, JsonIsPassedThrough) {
  InProcessDaemon server;
  std::ostringstream out, err;
  EXPECT_EQ(RunStats(StatsFlags{Flags(server), true}, out, err), 0) << err.str();
  // The daemon's KVT.STATS document as it came, one line.
  ASSERT_EQ(out.str().back(), '\n');
  EXPECT_EQ(nlohmann::json::parse(out.str())["totals"]["blocks_present"], 0);
  std::ostringstream table;
  EXPECT_EQ(RunStats(StatsFlags{Flags(server), false}, table, err), 0) << err.str();
}

// Regression: with --json a KVT.STATS answer that is not JSON was printed with exit code 0, though
// the header promises 1.
TEST(StatsCommandTest, JsonRefusesAnAnswerThatIsNotJson) {
  InProcessDaemon server;
  server.faults().SetRawReply("KVT.STATS", "$13\r\n{\"totals\": {1\r\n");
  std::ostringstream out, err;
  EXPECT_EQ(RunStats(StatsFlags{Flags(server), true}, out, err), 1);
  EXPECT_TRUE(out.str().empty()) << out.str();
  EXPECT_NE(err.str().find("not JSON"), std::string::npos) << err.str();
}

class BenchCommandTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BenchCommandTest, PutsThenGetsEveryBlock) {
  InProcessDaemon server;
  BenchFlags flags = SmallBench(server, 12);
  flags.concurrency = 2;
  flags.path = GetParam();
  flags.batch = 5;
  flags.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunBench(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["put"]["blocks_ok"], 24);
  EXPECT_EQ(j["get"]["blocks_ok"], 24);
  EXPECT_EQ(j["get"]["blocks_failed"], 0);
  EXPECT_EQ(j["put"]["calls"], 6);  // 2 threads x ceil(12 / 5)
  EXPECT_GT(j["get"]["latency_us"]["p99"].get<double>(), 0.0);
  EXPECT_EQ(server.block_count(), 0u);  // the bench namespace was dropped

  flags.json = false;
  std::ostringstream table;
  ASSERT_EQ(RunBench(flags, table, err), 0) << err.str();
  EXPECT_NE(table.str().find("get "), std::string::npos) << table.str();
}

INSTANTIATE_TEST_SUITE_P(Paths, BenchCommandTest, ::testing::Values("shm", "inline"));

TEST(BenchCommandTest, WarmUpRoundsAreNotCounted) {
  InProcessDaemon server;
  BenchFlags flags = SmallBench(server, 10);
  flags.batch = 4;
  flags.json = true;
  for (size_t warmup : {size_t{0}, size_t{3}}) {
    flags.warmup = warmup;
    std::ostringstream out, err;
    ASSERT_EQ(RunBench(flags, out, err), 0) << err.str();
    const nlohmann::json j = nlohmann::json::parse(out.str());
    EXPECT_EQ(j["put"]["blocks_ok"], 10) << "warmup " << warmup;
    EXPECT_EQ(j["put"]["calls"], 3) << "warmup " << warmup;
    EXPECT_EQ(j["get"]["blocks_ok"], 10) << "warmup " << warmup;
  }
}

// What a bench of two daemons sharing a remote tier does: one run puts and keeps, another with the
// same salt only gets, and finds the same blocks; a get of a salt nobody put finds none.
TEST(BenchCommandTest, OnePhaseRunsWithTheSameSaltAddressTheSameBlocks) {
  InProcessDaemon server;
  BenchFlags flags = SmallBench(server, 6);
  flags.concurrency = 2;
  flags.salt = "shared-salt";
  flags.json = true;
  flags.keep = true;
  auto run = [&](const std::string& only) {
    flags.only = only;
    std::ostringstream out, err;
    EXPECT_EQ(RunBench(flags, out, err), 0) << err.str();
    return nlohmann::json::parse(out.str());
  };
  const nlohmann::json put = run("put");
  EXPECT_EQ(put["put"]["blocks_ok"], 12);
  EXPECT_FALSE(put.contains("get"));
  EXPECT_EQ(server.block_count(), 12u);

  const nlohmann::json get = run("get");
  EXPECT_FALSE(get.contains("put"));
  EXPECT_EQ(get["get"]["blocks_ok"], 12);
  EXPECT_EQ(server.block_count(), 12u);  // no warm-up rounds deleted them

  flags.salt = "another-salt";
  const nlohmann::json miss = run("get");
  EXPECT_EQ(miss["get"]["blocks_ok"], 0);
  EXPECT_EQ(miss["get"]["blocks_failed"], 12);
}

// Regression: a --url that is not valid UTF-8 made --json abort (nlohmann's type_error 316) after
// the whole run.
TEST(BenchCommandTest, JsonSurvivesAUrlThatIsNotUtf8) {
  InProcessDaemon server;
  BenchFlags flags = SmallBench(server, 2);
  RemovedAtEnd link;
  flags.client.url = Latin1Url(server, link);
  flags.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunBench(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_NE(j["url"].get<std::string>().find("caf\xef\xbf\xbd"), std::string::npos);  // U+FFFD
  EXPECT_EQ(j["get"]["blocks_ok"], 2);
}

// Regression: `--only get` without --salt read a fresh random namespace (every get missed, exit 0),
// and without --keep it dropped the namespace it had only read.
TEST(BenchCommandTest, AGetOnlyRunNeedsASaltAndDropsNothing) {
  InProcessDaemon server;
  BenchFlags flags = SmallBench(server, 3);
  flags.only = "get";
  std::ostringstream out, err;
  EXPECT_EQ(RunBench(flags, out, err), 1);
  EXPECT_NE(err.str().find("--only get"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("--salt"), std::string::npos) << err.str();

  flags.salt = "kept";
  flags.only = "put";
  flags.keep = true;
  ASSERT_EQ(RunBench(flags, out, err), 0) << err.str();
  flags.only = "get";
  flags.keep = false;
  ASSERT_EQ(RunBench(flags, out, err), 0) << err.str();
  EXPECT_EQ(server.block_count(), 3u);
}

TEST(BenchCommandTest, BadBlockSizeFails) {
  InProcessDaemon server;
  BenchFlags flags = SmallBench(server, 1);
  flags.block_bytes = "12 furlongs";
  std::ostringstream out, err;
  EXPECT_EQ(RunBench(flags, out, err), 1);
  EXPECT_NE(err.str().find("--block-bytes"), std::string::npos);
}

bool Registered(const InProcessDaemon& server) {
  for (const std::string& command : server.commands()) {
    if (command == "KVT.REGISTER") return true;
  }
  return false;
}

// Regression: a block of 1 TiB, or 10^11 blocks' keys, died of bad_alloc after the namespace was
// registered. Such runs are refused before connecting.
TEST(BenchCommandTest, ARunTooLargeToHoldIsRefusedBeforeRegistering) {
  InProcessDaemon server;
  BenchFlags flags;
  flags.client = Flags(server);
  struct Case {
    const char* block_bytes;
    size_t count, batch, concurrency;
    const char* message;
  };
  for (const Case& c : {Case{"1TiB", 1, 1, 1, "--block-bytes: '1TiB'"},
                        Case{"4KiB", 100'000'000'000, 1, 1, "--count 100000000000"},
                        Case{"4KiB", SIZE_MAX, 1, 2, "--count 18446744073709551615"},
                        Case{"1GiB", 64, 32, 1, "of buffers"}}) {
    flags.block_bytes = c.block_bytes;
    flags.count = c.count;
    flags.batch = c.batch;
    flags.concurrency = c.concurrency;
    std::ostringstream out, err;
    EXPECT_EQ(RunBench(flags, out, err), 1) << c.message;
    EXPECT_NE(err.str().find(c.message), std::string::npos) << err.str();
  }
  EXPECT_FALSE(Registered(server));
  // The check above can see a registration: a run that fits makes one.
  flags = SmallBench(server, 1);
  std::ostringstream out, err;
  EXPECT_EQ(RunBench(flags, out, err), 0) << err.str();
  EXPECT_TRUE(Registered(server));
}

TEST(ReplayCommandTest, ReplaysTheTraceAndReportsHits) {
  InProcessDaemon server;
  ReplayFlags flags = ThreeRequestReplay(server, "8KiB");
  flags.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunReplay(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["requests"], 3);
  EXPECT_EQ(j["blocks"], 9);
  EXPECT_EQ(j["served_blocks"], 5);
  EXPECT_EQ(j["corrupt_blocks"], 0);
  EXPECT_DOUBLE_EQ(j["hit_ratio_by_tier"]["host"].get<double>(), 5.0 / 9.0);

  // --limit, inline, the table; the same salt finds the blocks of the first run.
  flags.limit = 1;
  flags.path = "inline";
  flags.json = false;
  std::ostringstream table;
  ASSERT_EQ(RunReplay(flags, table, err), 0) << err.str();
  EXPECT_NE(table.str().find("1 requests"), std::string::npos) << table.str();
}

// Regression: the table left out the blocks served from the remote tier (the JSON had them), so
// its tiers did not add up to the hit ratio on a daemon with a remote tier.
TEST(ReplayCommandTest, TheTableShowsEveryTierTheRemoteOneIncluded) {
  InProcessDaemon server;
  ReplayFlags flags = ThreeRequestReplay(server, "8KiB");
  std::ostringstream table, err;
  ASSERT_EQ(RunReplay(flags, table, err), 0) << err.str();
  EXPECT_NE(table.str().find("gpu 0.00%  host 55.56%  nvme 0.00%  remote 0.00%\n"),
            std::string::npos)
      << table.str();
}

// --speed sends each request at its timestamp divided by the speed: 0, 1 and 2 ms at 0.02 are
// 0, 50 and 100 ms after the start, so the run lasts at least 100 ms.
TEST(ReplayCommandTest, SpeedSendsRequestsAtTheirTraceTimes) {
  InProcessDaemon server;
  ReplayFlags flags = ThreeRequestReplay(server, "8KiB");
  flags.json = true;
  flags.speed = 0.02;
  std::ostringstream out, err;
  ASSERT_EQ(RunReplay(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["requests"], 3);
  EXPECT_EQ(j["served_blocks"], 5);
  EXPECT_GE(j["wall_s"].get<double>(), 0.1);
}

// Regression: a trace path or --url that is not valid UTF-8 made --json abort (nlohmann's
// type_error 316) after the whole replay.
TEST(ReplayCommandTest, JsonSurvivesNamesThatAreNotUtf8) {
  InProcessDaemon server;
  ReplayFlags flags;
  flags.client = Flags(server);
  RemovedAtEnd link;
  flags.client.url = Latin1Url(server, link);
  flags.trace_path = ::testing::TempDir() + "/trace-caf\xe9.jsonl";
  const RemovedAtEnd trace{flags.trace_path};
  std::filesystem::copy_file(std::string(KVTIER_CLI_TESTDATA) + "/three_requests.jsonl",
                             flags.trace_path, std::filesystem::copy_options::overwrite_existing);
  flags.block_bytes = "8KiB";
  flags.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunReplay(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_NE(j["trace"].get<std::string>().find("trace-caf\xef\xbf\xbd"), std::string::npos);
  EXPECT_NE(j["url"].get<std::string>().find("caf\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(j["requests"], 3);
}

// Regression: --block-bytes 1TiB died of bad_alloc after registering the namespace.
TEST(ReplayCommandTest, ABlockTooLargeToHoldIsRefusedBeforeRegistering) {
  InProcessDaemon server;
  ReplayFlags flags = ThreeRequestReplay(server, "1TiB");
  std::ostringstream out, err;
  EXPECT_EQ(RunReplay(flags, out, err), 1);
  EXPECT_NE(err.str().find("--block-bytes: '1TiB' is more than the 1.0 GiB"), std::string::npos)
      << err.str();
  EXPECT_FALSE(Registered(server));
}

// Regression: --speed 1e-300 made the deadline overflow int64 (undefined; in practice a time in the
// past), so the replay ran unpaced and exited 0. Speeds that are not 0, finite and at least
// kMinReplaySpeed are refused, by the parser and by the run.
TEST(ReplayCommandTest, ASpeedTooSlowOrNotANumberIsRefused) {
  InProcessDaemon server;
  ReplayFlags flags = ThreeRequestReplay(server, "8KiB");
  for (double speed : {1e-300, 1e-7, -1.0, std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
    flags.speed = speed;
    std::ostringstream out, err;
    EXPECT_EQ(RunReplay(flags, out, err), 1) << speed;
    EXPECT_NE(err.str().find("--speed: "), std::string::npos) << err.str();
  }
  for (const char* speed : {"1e-300", "inf", "nan", "fast"}) {
    CLI::App app;
    AddReplayCommand(app);
    EXPECT_THROW(app.parse(std::string("replay t.jsonl --block-bytes 1MiB --speed ") + speed),
                 CLI::ValidationError)
        << speed;
  }
}

TEST(ReplayOffsetTest, ScalesByTheSpeedAndStaysWithinTheClock) {
  using std::chrono::microseconds;
  EXPECT_EQ(ReplayOffset(2, 0, 0.02), microseconds(100'000));
  EXPECT_EQ(ReplayOffset(1'500, 1'000, 2.0), microseconds(250'000));
  EXPECT_EQ(ReplayOffset(0, 5, 1.0), microseconds(0));  // out of order: due at once
  EXPECT_EQ(ReplayOffset(UINT64_MAX, 0, kMinReplaySpeed), kMaxReplayOffset);
}

TEST(ReplayCommandTest, UnreadableTraceFails) {
  InProcessDaemon server;
  ReplayFlags flags;
  flags.client = Flags(server);
  flags.trace_path = std::string(KVTIER_CLI_TESTDATA) + "/missing_hash_ids.jsonl";
  flags.block_bytes = "1KiB";
  std::ostringstream out, err;
  EXPECT_EQ(RunReplay(flags, out, err), 1);
  EXPECT_NE(err.str().find("missing_hash_ids.jsonl:3"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace kvtier::cli

#include "daemon/cli/simulate_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvtier::cli {
namespace {

const std::string kTestData = KVTIER_CLI_TESTDATA;

// The three-request trace at capacity 3: the flags most tests start from.
SimulateFlags ThreeRequests() {
  SimulateFlags flags;
  flags.trace_path = kTestData + "/three_requests.jsonl";
  flags.options.capacity_blocks = 3;
  return flags;
}

// Runs `flags` with --json, which must succeed without a word on stderr, and parses the report.
nlohmann::json RunJson(SimulateFlags flags) {
  flags.json = true;
  std::ostringstream out, err;
  EXPECT_EQ(RunSimulate(flags, out, err), 0) << err.str();
  EXPECT_TRUE(err.str().empty()) << err.str();
  return nlohmann::json::parse(out.str());
}

TEST(SimulateCommandTest, JsonHasTheDocumentedFields) {
  nlohmann::json j = RunJson(ThreeRequests());
  EXPECT_EQ(j["requests"], 3);
  EXPECT_EQ(j["total_blocks"], 9);
  EXPECT_EQ(j["hit_blocks"], 4);
  EXPECT_EQ(j["evictions"], 2);
  EXPECT_DOUBLE_EQ(j["block_hit_ratio"].get<double>(), 4.0 / 9.0);
  EXPECT_DOUBLE_EQ(j["token_hit_ratio"].get<double>(), 2048.0 / 4136.0);
  EXPECT_EQ(j["policy"], "sticky");  // the default
  EXPECT_EQ(j["not_admitted_blocks"], 0);
}

TEST(SimulateCommandTest, JsonLeadsWithTheChosenMetricAndReportsTheRate) {
  SimulateFlags flags = ThreeRequests();
  flags.metric = "prefill";
  flags.options.cost.linear = 1.0;
  flags.options.cost.quadratic = 0.0;  // then saved prefill is proportional to hit tokens
  nlohmann::json j = RunJson(flags);
  EXPECT_EQ(j["metric"], "prefill");
  EXPECT_DOUBLE_EQ(j["metric_ratio"].get<double>(), 2048.0 / 4136.0);
  EXPECT_DOUBLE_EQ(j["saved_prefill_ratio"].get<double>(), 2048.0 / 4136.0);
  EXPECT_GT(j["million_refs_per_s"].get<double>(), 0.0);
  EXPECT_FALSE(j.contains("optimal"));  // only belady knows
}

// Belady on the three requests, capacity 3: after [1 2 4] the cache holds 1 2 3 4, and 4, never
// used again, goes: the third request hits all three blocks (LRU: two).
TEST(SimulateCommandTest, BeladyReportsItsOptimum) {
  SimulateFlags flags = ThreeRequests();
  flags.options.policy = "belady";
  nlohmann::json j = RunJson(flags);
  EXPECT_EQ(j["hit_blocks"], 5);
  EXPECT_EQ(j["upper_bound_hit_blocks"], 5);
  EXPECT_EQ(j["optimal"], true);
  EXPECT_EQ(j["metric"], "block");
  EXPECT_DOUBLE_EQ(j["metric_ratio"].get<double>(), 5.0 / 9.0);

  std::ostringstream table, err;
  ASSERT_EQ(RunSimulate(flags, table, err), 0) << err.str();
  EXPECT_NE(table.str().find("optimum          exact"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("metric           block: 55.56%"), std::string::npos) << table.str();
}

// Regression: a trace path that is not valid UTF-8 made --json abort (nlohmann's type_error 316)
// after the whole simulation had run.
TEST(SimulateCommandTest, JsonSurvivesATracePathThatIsNotUtf8) {
  SimulateFlags flags = ThreeRequests();
  const std::string latin1_path = ::testing::TempDir() + "/caf\xe9.jsonl";
  std::filesystem::copy_file(flags.trace_path, latin1_path,
                             std::filesystem::copy_options::overwrite_existing);
  flags.trace_path = latin1_path;
  nlohmann::json j = RunJson(flags);
  std::filesystem::remove(latin1_path);
  EXPECT_EQ(j["trace"], ::testing::TempDir() + "/caf\xef\xbf\xbd.jsonl");  // U+FFFD
  EXPECT_EQ(j["requests"], 3);
}

// Regression: tinylfu's sketch was sized for --capacity-blocks, 8 bytes a block: 8 GB at 10^9,
// bad_alloc at 10^10, for a three-request trace. It now follows the trace.
TEST(SimulateCommandTest, TinyLfuAtACapacityTheTraceCannotFillAllocatesForTheTrace) {
  SimulateFlags flags = ThreeRequests();
  flags.options.policy = "tinylfu";
  flags.options.capacity_blocks = size_t{1} << 40;
  nlohmann::json j = RunJson(flags);
  EXPECT_EQ(j["capacity_blocks"], size_t{1} << 40);
  EXPECT_EQ(j["hit_blocks"], 5);  // [1 2 3] [1 2 4] [1 2 3]: nothing evicted
  EXPECT_EQ(j["evictions"], 0);
}

// Regression: --cost-quadratic 1e308 overflowed the totals to infinity, and --json printed
// prefill_cost null and a NaN ratio with exit code 0.
TEST(SimulateCommandTest, ACostModelThatOverflowsIsRefused) {
  for (const char* policy : {"lru", "belady"}) {
    SimulateFlags flags = ThreeRequests();
    flags.options.policy = policy;
    flags.options.cost.quadratic = 1e308;
    flags.json = true;
    std::ostringstream out, err;
    EXPECT_EQ(RunSimulate(flags, out, err), 1) << policy;
    EXPECT_NE(err.str().find("overflows a double: lower --cost-linear or --cost-quadratic"),
              std::string::npos)
        << err.str();
    EXPECT_TRUE(out.str().empty()) << out.str();
  }
}

// Regression: --key-order-puts with belady was ignored but reported as put_order "key".
TEST(SimulateCommandTest, KeyOrderPutsWithBeladyIsRefused) {
  SimulateFlags flags = ThreeRequests();
  flags.options.policy = "belady";
  flags.options.key_order_puts = true;
  std::ostringstream out, err;
  EXPECT_EQ(RunSimulate(flags, out, err), 1);
  EXPECT_NE(err.str().find("key-order puts"), std::string::npos) << err.str();
  EXPECT_TRUE(out.str().empty()) << out.str();
}

TEST(SimulateCommandTest, TableNamesPolicyAndRatios) {
  SimulateFlags flags = ThreeRequests();
  flags.options.policy = "arc";
  std::ostringstream out, err;
  ASSERT_EQ(RunSimulate(flags, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("arc"), std::string::npos);
  EXPECT_NE(out.str().find("%"), std::string::npos);
}

TEST(SimulateCommandTest, MalformedLineFailsNamingFileAndLine) {
  SimulateFlags flags;
  flags.trace_path = kTestData + "/missing_hash_ids.jsonl";
  flags.options.capacity_blocks = 10;
  std::ostringstream out, err;
  EXPECT_EQ(RunSimulate(flags, out, err), 1);
  EXPECT_NE(err.str().find(flags.trace_path + ":3: missing \"hash_ids\""), std::string::npos)
      << err.str();
  EXPECT_TRUE(out.str().empty());
}

TEST(SimulateCommandTest, FlagsParseThroughTheSubcommand) {
  CLI::App app;
  Command command = AddSimulateCommand(app);
  app.parse("simulate t.jsonl --capacity-blocks 7 --policy arc --json");
  EXPECT_TRUE(command.parser->parsed());
}

TEST(SimulateCommandTest, MetricAndCostFlagsParse) {
  CLI::App app;
  Command command = AddSimulateCommand(app);
  app.parse(
      "simulate t.jsonl --capacity-blocks 7 --policy belady --metric prefill --cost-linear 2 "
      "--cost-quadratic 0.5");
  EXPECT_TRUE(command.parser->parsed());
}

// Regression: the flags lived only as long as the returned Command, so parsing after dropping it
// wrote into freed memory (found by ASan).
TEST(SimulateCommandTest, ParserOutlivesADroppedCommand) {
  CLI::App app;
  AddSimulateCommand(app);
  EXPECT_NO_THROW(app.parse("simulate t.jsonl --capacity-blocks 7 --policy arc --json"));
}

TEST(SimulateCommandTest, BadFlagsAreRejectedByTheParser) {
  for (const char* line : {"simulate t.jsonl --capacity-blocks 7 --policy nope",
                           "simulate t.jsonl --capacity-blocks 0", "simulate t.jsonl",
                           "simulate t.jsonl --capacity-blocks 7 --metric bytes",
                           "simulate t.jsonl --capacity-blocks 7 --cost-quadratic -1"}) {
    CLI::App app;
    AddSimulateCommand(app);
    EXPECT_THROW(app.parse(line), CLI::ParseError) << line;
  }
}

}  // namespace
}  // namespace kvtier::cli

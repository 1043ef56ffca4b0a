#include "daemon/cli/explain_command.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "client/testing/in_process_daemon.h"
#include "common/json_text.h"
#include "common/resp/reply_parser.h"
#include "daemon/cli/explain_format.h"
#include "daemon/cli/replayer.h"

namespace kvtier::cli {
namespace {

using client::testing::InProcessDaemon;

hashing::NamespaceDescriptor Descriptor() {
  hashing::NamespaceDescriptor d;
  d.model_id = "tiny/model";
  d.kv_dtype = "fp16";
  d.num_layers = 2;
  d.num_kv_heads = 1;
  d.head_dim = 4;
  d.tokens_per_block = 2;
  d.layout_tag = "nhd";
  return d;
}

ExplainFlags Flags(const InProcessDaemon& server) {
  ExplainFlags flags;
  flags.client.url = server.url();
  flags.client.timeout_ms = 5000;
  flags.ns = Descriptor();
  return flags;
}

// Stores `keys` under `ns`, 64 bytes each.
void PutBlocks(client::Client& c, const NamespaceId& ns, const std::vector<BlockKey>& keys) {
  const std::vector<std::byte> payload(64, std::byte{7});
  std::vector<std::span<const std::byte>> payloads(keys.size(), payload);
  Result<std::vector<Status>> put = c.PutInline(ns, keys, payloads);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (const Status& s : *put) ASSERT_TRUE(s.ok()) << s.ToString();
}

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ExplainCommandTest, TokensFromArgumentsAndAFileAsJsonAndTable) {
  InProcessDaemon server;
  Result<client::Client> c = client::Client::Connect(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<client::NamespaceInfo> ns = c->RegisterNamespace(Descriptor(), 64);
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  const std::vector<uint32_t> tokens = {5, 6, 7, 8, 9, 10};
  const std::vector<BlockKey> keys = client::Client::HashTokens(*ns, tokens).value();
  PutBlocks(*c, ns->id, keys);
  // Remove block 2 so that one block has a reason other than never stored.
  std::string packed(16, '\0');
  keys[2].ToBytes(reinterpret_cast<std::byte*>(packed.data()));
  ASSERT_EQ(c->Command({"KVT.DEL", ns->id.ToHex(), packed})->integer, 1);

  ExplainFlags flags = Flags(server);
  flags.tokens = {5, 6, 7, 8};
  flags.tokens_file = TempFile("explain_tokens.txt", "9, 10\n11 12\n");
  flags.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunExplain(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["ns"], ns->id.ToHex());
  EXPECT_EQ(j["registered"], true);
  ASSERT_EQ(j["blocks"].size(), 4u);
  EXPECT_EQ(j["blocks"][0]["state"], "present");
  EXPECT_EQ(j["blocks"][0]["tier"], "host");
  EXPECT_EQ(j["blocks"][0]["key"], keys[0].ToHex());
  EXPECT_EQ(j["blocks"][2]["reason"], "removed");
  EXPECT_EQ(j["blocks"][3]["reason"], "never_stored");

  flags.json = false;
  std::ostringstream table;
  ASSERT_EQ(RunExplain(flags, table, err), 0) << err.str();
  const std::string t = table.str();
  EXPECT_NE(t.find("(registered)"), std::string::npos) << t;
  EXPECT_NE(t.find("removed "), std::string::npos) << t;
  EXPECT_NE(t.find("never stored"), std::string::npos) << t;
  EXPECT_NE(t.find("4 blocks: 2 present, missing: 1 never stored, 1 removed"), std::string::npos)
      << t;
}

// Regression: a string in the daemon's answer that is not valid UTF-8 made --json abort
// (nlohmann's type_error 316). KVT.REGISTER now refuses such names, but a label recovered from
// an older NVMe catalog can still carry one: the answer is formatted as explain --json does.
TEST(ExplainCommandTest, JsonSurvivesADaemonStringThatIsNotUtf8) {
  resp::ReplyParser parser;
  const std::string answer = "%2\r\n$6\r\npolicy\r\n$4\r\ncaf\xe9\r\n$6\r\nblocks\r\n*0\r\n";
  ASSERT_TRUE(parser.Feed(answer).ok());
  ASSERT_TRUE(parser.has_reply());
  const nlohmann::json j = nlohmann::json::parse(JsonText(ExplainToJson(parser.TakeReply())));
  EXPECT_EQ(j["policy"], "caf\xef\xbf\xbd") << j.dump();  // U+FFFD
}

TEST(ExplainCommandTest, ATraceRequestIsExplainedWithReplaysKeys) {
  InProcessDaemon server;
  Result<client::Client> c = client::Client::Connect(server.url());
  ASSERT_TRUE(c.ok());
  const hashing::NamespaceDescriptor d = TraceNamespace(512, "salt-1");
  Result<client::NamespaceInfo> ns = c->RegisterNamespace(d, 64);
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  const std::vector<uint64_t> ids = {1, 2, 3};
  std::vector<BlockKey> keys = TraceKeys(ns->id, ids);
  keys.resize(2);
  PutBlocks(*c, ns->id, keys);

  ExplainFlags flags;
  flags.client.url = server.url();
  flags.trace_path = KVTIER_CLI_TESTDATA "/three_requests.jsonl";
  flags.request = 0;
  flags.ns.tokens_per_block = 512;
  flags.ns.tenant_salt = "salt-1";
  flags.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunExplain(flags, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  ASSERT_EQ(j["blocks"].size(), 3u);
  EXPECT_EQ(j["blocks"][1]["state"], "present");
  EXPECT_EQ(j["blocks"][2]["reason"], "never_stored");

  flags.request = 99;
  std::ostringstream err2;
  EXPECT_EQ(RunExplain(flags, out, err2), 1);
  EXPECT_NE(err2.str().find("has only"), std::string::npos) << err2.str();
}

TEST(ExplainCommandTest, BadInputIsReportedBeforeConnecting) {
  ExplainFlags flags;
  flags.client.url = "unix:///nonexistent/kvtierd.sock";
  flags.ns = Descriptor();
  std::ostringstream out, err;
  EXPECT_EQ(RunExplain(flags, out, err), 1);
  EXPECT_NE(err.str().find("no tokens"), std::string::npos) << err.str();
  flags.tokens = {1, 2};
  flags.ns.layout_tag.clear();
  std::ostringstream err2;
  EXPECT_EQ(RunExplain(flags, out, err2), 1);
  EXPECT_NE(err2.str().find("layout"), std::string::npos) << err2.str();
}

TEST(ParseTokenIdsTest, AcceptsSeparatorsAndAJsonArrayAndNamesABadWord) {
  EXPECT_EQ(ParseTokenIds("1 2,3\n4\t5").value(), (std::vector<uint32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(ParseTokenIds(" [7, 8, 4294967295]\n").value(),
            (std::vector<uint32_t>{7, 8, 4294967295u}));
  EXPECT_TRUE(ParseTokenIds("").value().empty());
  Result<std::vector<uint32_t>> bad = ParseTokenIds("1 two 3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'two'"), std::string::npos);
  EXPECT_FALSE(ParseTokenIds("4294967296").ok());
  EXPECT_FALSE(ParseTokenIds("-1").ok());
  EXPECT_FALSE(ParseTokenIds("[1, 2").ok());
}

TEST(ExplainFormatTest, AnEvictedBlockShowsPolicyCauseAndPressure) {
  const nlohmann::json explained = {
      {"ns", "00ff"},
      {"registered", true},
      {"policy", "lru"},
      {"log_entries", 65536},
      {"log_recorded", 3},
      {"blocks",
       {{{"key", "0123456789abcdef0123456789abcdef"},
         {"state", "missing"},
         {"reason", "evicted"},
         {"tier", "nvme"},
         {"age_us", 2500000},
         {"policy", "lru"},
         {"cause", "last_tier"},
         {"tier_used_bytes", 1024},
         {"tier_capacity_bytes", 1024}},
        {{"key", "ff"},
         {"state", "missing"},
         {"reason", "other_namespace"},
         {"elsewhere",
          {{{"field", "layout"}, {"value", "hnd"}, {"ns", "abcd"}, {"tier", "host"}}}}}}}};
  const std::string t = FormatExplainTable(explained);
  EXPECT_NE(t.find("0123456789abcdef  missing  nvme    evicted 2.5 s ago by lru, last tier, "
                   "tier 100% full (1.0 KiB of 1.0 KiB)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("held where layout=hnd (host, ns abcd)"), std::string::npos) << t;
}

}  // namespace
}  // namespace kvtier::cli

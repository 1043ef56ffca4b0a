#include "daemon/config/daemon_config.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kvtier::config {
namespace {

Result<ParseOutcome> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "kvtierd");
  return ParseCommandLine(static_cast<int>(args.size()), args.data());
}

// Writes `yaml` to a file in the test's temporary directory and returns its path.
std::string WriteConfig(const std::string& name, const std::string& yaml) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

TEST(DaemonConfigTest, RunsOnEmbeddedDefaults) {
  auto r = Parse({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DaemonConfig& c = r->config;
  EXPECT_FALSE(c.unix_path.empty());
  EXPECT_EQ(c.tcp_host, "127.0.0.1");
  EXPECT_GE(c.host_bytes, 64ull << 20);
  EXPECT_LE(c.host_bytes, 64ull << 30);
  EXPECT_EQ(c.io_threads, DefaultIoThreads(std::thread::hardware_concurrency()));
  EXPECT_FALSE(c.data_dir.empty());
  // No GPU tier unless asked for: the engine beside kvtierd owns the device's memory.
  EXPECT_EQ(c.gpu_bytes, 0u);
}

TEST(DaemonConfigTest, DefaultIoThreadsLeaveHalfTheCores) {
  EXPECT_EQ(DefaultIoThreads(0), 1u);  // hardware_concurrency() may not know
  EXPECT_EQ(DefaultIoThreads(1), 1u);
  EXPECT_EQ(DefaultIoThreads(2), 1u);
  EXPECT_EQ(DefaultIoThreads(8), 4u);
  EXPECT_EQ(DefaultIoThreads(64), 8u);
}

TEST(DaemonConfigTest, FlagsTakeSizesWithSuffixes) {
  auto r = Parse({"--host-bytes", "512MiB", "--port", "0", "--unix", "/tmp/x.sock", "--http-port",
                  "0", "--data-dir", "/tmp/d", "--policy", "arc"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.host_bytes, 512ull << 20);
  EXPECT_EQ(r->config.tcp_port, 0);
  EXPECT_EQ(r->config.unix_path, "/tmp/x.sock");
  EXPECT_EQ(r->config.eviction_policy, "arc");
}

// Regression: slabs were 64 MiB whatever the host tier's size, so a 64 MiB tier was one slab and a
// SET of a value of a new size gave up every other value. "auto" keeps 32 slabs down to 1 MiB.
TEST(DaemonConfigTest, AutoSlabsLeaveTheHostTierManyOfThem) {
  EXPECT_EQ(AutoSlabBytes(64ull << 30), 64ull << 20);
  EXPECT_EQ(AutoSlabBytes(2ull << 30), 64ull << 20);
  EXPECT_EQ(AutoSlabBytes(1ull << 30), 32ull << 20);
  EXPECT_EQ(AutoSlabBytes(256ull << 20), 8ull << 20);
  EXPECT_EQ(AutoSlabBytes(64ull << 20), 2ull << 20);
  EXPECT_EQ(AutoSlabBytes(4ull << 20), 1ull << 20);  // the floor
  auto r = Parse({"--host-bytes", "64MiB", "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.slab_bytes, 2ull << 20);
  // A size given is kept, whatever the tier's.
  const std::string file = WriteConfig("slab.yaml", "tiers: {slab_bytes: 64MiB}\n");
  r = Parse({"--config", file.c_str(), "--host-bytes", "64MiB", "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.slab_bytes, 64ull << 20);
}

TEST(DaemonConfigTest, BadFlagValuesNameTheFlag) {
  auto r = Parse({"--host-bytes", "12 furlongs"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--host-bytes"), std::string::npos);
  EXPECT_FALSE(Parse({"--port", "70000"}).ok());
  EXPECT_FALSE(Parse({"--no-such-flag"}).ok());
}

// Regression: --io-threads 1000 was taken, and refused by the server only after the tiers had
// been opened and the NVMe catalog recovered.
TEST(DaemonConfigTest, IoThreadsFlagIsBoundedBeforeAnyTierOpens) {
  auto r = Parse({"--io-threads", "1000"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--io-threads"), std::string::npos) << r.status().ToString();
  auto most = Parse({"--io-threads", "256"});
  ASSERT_TRUE(most.ok()) << most.status().ToString();
  EXPECT_EQ(most->config.io_threads, 256u);
}

TEST(DaemonConfigTest, YamlOverridesDefaultsAndUnknownKeysAreErrors) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyYaml("listen:\n  port: 7000\ntiers:\n  host_bytes: 2GiB\n"
                        "limits:\n  idle_timeout_ms: 5000\n",
                        "test.yaml", c)
                  .ok());
  EXPECT_EQ(c.tcp_port, 7000);
  EXPECT_EQ(c.host_bytes, 2ull << 30);
  EXPECT_EQ(c.idle_timeout_ms, 5000u);
  ASSERT_TRUE(ApplyYaml("limits:\n  departure_log_entries: 1024\n", "test.yaml", c).ok());
  EXPECT_EQ(c.departure_log_entries, 1024u);
  Status st = ApplyYaml("tiers:\n  host_byte: 1GiB\n", "test.yaml", c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tiers.host_byte"), std::string::npos);
  st = ApplyYaml("listen:\n  port: many\n", "test.yaml", c);
  EXPECT_NE(st.message().find("listen.port"), std::string::npos);
  EXPECT_FALSE(ApplyYaml("listen: [1, 2\n", "test.yaml", c).ok());
}

// Regression: a section with every key commented out (a null value) was refused as an unknown
// key, while an unknown section given as a mapping, or a value given as a mapping, was taken
// without a word.
TEST(DaemonConfigTest, SectionsAreMappingsOrEmptyAndValuesAreScalars) {
  DaemonConfig c;
  for (const char* empty : {"store:\n  # eviction_policy: lru\n", "store: {}\n", "nvme:\n"}) {
    Status st = ApplyYaml(empty, "test.yaml", c);
    EXPECT_TRUE(st.ok()) << empty << ": " << st.ToString();
  }
  EXPECT_EQ(c.eviction_policy, DaemonConfig{}.eviction_policy);
  struct Case {
    const char* yaml;
    const char* message;
  } cases[] = {
      {"foo: {}\n", "test.yaml: unknown key 'foo'"},
      {"foo:\n", "test.yaml: unknown key 'foo'"},
      {"tiers: {bar: {}}\n", "test.yaml: unknown key 'tiers.bar'"},
      {"tiers: {host_bytes: {}}\n", "test.yaml: tiers.host_bytes: expected a value"},
      {"tiers: {host_bytes: {a: 1}}\n", "test.yaml: tiers.host_bytes: expected a value"},
      {"tiers:\n  host_bytes:\n", "test.yaml: tiers.host_bytes: expected a value"},
      {"store: lru\n", "test.yaml: store: expected a section"},
      {"nvme: {paths: {a: b}}\n", "test.yaml: nvme.paths: expected a list"},
  };
  for (const Case& k : cases) {
    DaemonConfig config;
    Status st = ApplyYaml(k.yaml, "test.yaml", config);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << k.yaml;
    EXPECT_NE(st.message().find(k.message), std::string::npos) << k.yaml << ": " << st.message();
  }
}

TEST(DaemonConfigTest, NetworkListenerNeedsAPassword) {
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.tcp_host = "0.0.0.0";
  Status st = Finalize(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("listen.tcp_host"), std::string::npos);
  c.password = "secret";
  EXPECT_TRUE(Finalize(c).ok());
}

TEST(DaemonConfigTest, CrossFieldRulesNameTheKey) {
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.eviction_policy = "random";
  EXPECT_NE(Finalize(c).message().find("store.eviction_policy"), std::string::npos);
  c.eviction_policy = "lru";
  c.nvme_eviction_policy = "random";
  EXPECT_NE(Finalize(c).message().find("store.nvme_eviction_policy"), std::string::npos);
  c.nvme_eviction_policy = "s3fifo";
  EXPECT_TRUE(Finalize(c).ok());
  c.log_level = "loud";
  EXPECT_NE(Finalize(c).message().find("server.log_level"), std::string::npos);
}

// Limits of 0 passed: max_leases or max_reservations 0 made a daemon that said it was ready refuse
// every read or put, and the others were refused by the server only after the tiers had opened.
TEST(DaemonConfigTest, ZeroLimitsAreRefusedBeforeAnyTierOpens) {
  for (const char* key : {"max_leases", "max_reservations", "max_key_bytes", "max_inline_bytes",
                          "max_lookup_keys", "max_inflight_bytes_per_client", "max_clients"}) {
    DaemonConfig c;
    c.unix_path = "/tmp/s";
    ASSERT_TRUE(ApplyYaml("limits:\n  " + std::string(key) + ": 0\n", "test.yaml", c).ok());
    const Status st = Finalize(c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(st.message().find(std::string("limits.") + key), std::string::npos) << st.message();
  }
}

// One port for both listeners passed the start's bind probe (each was bound and closed in turn)
// and failed once the tiers had opened.
TEST(DaemonConfigTest, TheHttpListenerNeedsAPortOfItsOwn) {
  auto same = Parse({"--port", "7000", "--http-port", "7000", "--nvme-bytes", "0"});
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("listen.http_port"), std::string::npos);
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.tcp_port = c.http_port = 7000;
  c.http_host = "0.0.0.0";
  EXPECT_FALSE(Finalize(c).ok()) << "the wildcard takes the port on loopback too";
  c.http_host = "::";
  EXPECT_FALSE(Finalize(c).ok());
  c.tcp_port = 7001;
  EXPECT_TRUE(Finalize(c).ok());
}

// A host tier of 0 meant "auto" (0 is "auto" inside the config): a quarter of the memory,
// locked, where the GPU and NVMe tiers read 0 as off.
TEST(DaemonConfigTest, AHostTierOfZeroIsRefusedNotSizedFromMemory) {
  for (const char* zero : {"0", "0MiB"}) {
    auto parsed = Parse({"--host-bytes", zero});
    ASSERT_FALSE(parsed.ok()) << zero;
    EXPECT_NE(parsed.status().message().find("auto"), std::string::npos);
  }
  DaemonConfig c;
  EXPECT_FALSE(ApplyYaml("tiers:\n  host_bytes: 0\n", "test.yaml", c).ok());
  EXPECT_FALSE(ApplyYaml("tiers:\n  slab_bytes: 0\n", "test.yaml", c).ok());
  EXPECT_TRUE(ApplyYaml("tiers:\n  host_bytes: auto\n", "test.yaml", c).ok());
}

}  // namespace
}  // namespace kvtier::config

namespace kvtier::config {
namespace {

// The example shipped in deploy/ must load as it is, and state the embedded defaults.
TEST(DaemonConfigTest, ShippedExampleLoadsAndMatchesTheDefaults) {
  std::ifstream in(KVTIER_EXAMPLE_CONFIG);
  ASSERT_TRUE(in.good()) << KVTIER_EXAMPLE_CONFIG;
  std::stringstream text;
  text << in.rdbuf();
  DaemonConfig c;
  Status st = ApplyYaml(text.str(), KVTIER_EXAMPLE_CONFIG, c);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const DaemonConfig defaults;
  EXPECT_EQ(c.tcp_port, defaults.tcp_port);
  EXPECT_EQ(c.http_port, defaults.http_port);
  EXPECT_EQ(c.unix_mode, defaults.unix_mode);
  EXPECT_EQ(c.host_bytes, 0u);  // "auto"
  EXPECT_EQ(c.slab_bytes, defaults.slab_bytes);
  EXPECT_EQ(c.eviction_policy, defaults.eviction_policy);
  EXPECT_EQ(c.host_eviction_policy, defaults.host_eviction_policy);
  EXPECT_EQ(c.nvme_eviction_policy, defaults.nvme_eviction_policy);
  EXPECT_EQ(c.lease_timeout_ms, defaults.lease_timeout_ms);
  EXPECT_EQ(c.max_bulk_bytes, defaults.max_bulk_bytes);
  EXPECT_EQ(c.max_generic_name_bytes, defaults.max_generic_name_bytes);
  EXPECT_EQ(c.max_inflight_bytes_per_client, defaults.max_inflight_bytes_per_client);
  EXPECT_EQ(c.max_clients, defaults.max_clients);
  EXPECT_EQ(c.max_leases, defaults.max_leases);
  EXPECT_EQ(c.max_reservations, defaults.max_reservations);
  EXPECT_EQ(c.departure_log_entries, defaults.departure_log_entries);
  EXPECT_EQ(c.nvme_bytes, DaemonConfig::kAutoBytes);
  EXPECT_EQ(c.nvme_io_backend, defaults.nvme_io_backend);
  EXPECT_EQ(c.nvme_queue_depth, defaults.nvme_queue_depth);
  EXPECT_EQ(c.nvme_admission, defaults.nvme_admission);
  EXPECT_EQ(c.nvme_promote_on_hit, defaults.nvme_promote_on_hit);
  EXPECT_EQ(c.nvme_sync_interval_ms, defaults.nvme_sync_interval_ms);
  EXPECT_EQ(c.latency_histograms, defaults.latency_histograms);
  EXPECT_EQ(c.history, defaults.history);
  EXPECT_EQ(c.history_interval_ms, defaults.history_interval_ms);
  EXPECT_EQ(c.history_samples, defaults.history_samples);
  EXPECT_EQ(c.high_watermark, defaults.high_watermark);
  EXPECT_EQ(c.low_watermark, defaults.low_watermark);
  EXPECT_TRUE(c.nvme_paths.empty());
  EXPECT_EQ(c.gpu_bytes, defaults.gpu_bytes);
  EXPECT_EQ(c.gpu_device, defaults.gpu_device);
  EXPECT_EQ(c.gpu_fake, defaults.gpu_fake);
  EXPECT_EQ(c.gpu_copy_lanes, defaults.gpu_copy_lanes);
  EXPECT_EQ(c.gpu_promotion, defaults.gpu_promotion);
  EXPECT_EQ(c.gpu_promote_after_reads, defaults.gpu_promote_after_reads);
  EXPECT_EQ(c.gpu_promote_window_ms, defaults.gpu_promote_window_ms);
  EXPECT_EQ(c.remote_url, defaults.remote_url);
  EXPECT_EQ(c.remote_user, defaults.remote_user);
  EXPECT_EQ(c.remote_password, defaults.remote_password);
  EXPECT_EQ(c.remote_ttl_seconds, defaults.remote_ttl_seconds);
  EXPECT_EQ(c.remote_lookup_timeout_ms, defaults.remote_lookup_timeout_ms);
  EXPECT_EQ(c.remote_timeout_ms, defaults.remote_timeout_ms);
  EXPECT_EQ(c.remote_connect_timeout_ms, defaults.remote_connect_timeout_ms);
  EXPECT_EQ(c.remote_write_through, defaults.remote_write_through);
  EXPECT_EQ(c.shutdown_flush, defaults.shutdown_flush);
  EXPECT_EQ(c.shutdown_flush_seconds, defaults.shutdown_flush_seconds);
  EXPECT_TRUE(c.quotas.empty());
}

TEST(DaemonConfigTest, ShutdownFlushKeys) {
  const DaemonConfig defaults;
  EXPECT_TRUE(defaults.shutdown_flush);
  EXPECT_EQ(defaults.shutdown_flush_seconds, 0u);  // no bound: everything that fits
  DaemonConfig c;
  ASSERT_TRUE(ApplyYaml("shutdown:\n  flush: false\n  flush_seconds: 45\n", "test.yaml", c).ok());
  EXPECT_FALSE(c.shutdown_flush);
  EXPECT_EQ(c.shutdown_flush_seconds, 45u);
  for (const char* yaml : {"shutdown:\n  flush: sometimes\n", "shutdown:\n  flush_seconds: -1\n",
                           "shutdown:\n  flush_seconds: 100000\n"}) {
    DaemonConfig bad;
    Status st = ApplyYaml(yaml, "test.yaml", bad);
    ASSERT_FALSE(st.ok()) << yaml;
    EXPECT_NE(st.message().find("shutdown.flush"), std::string::npos) << st.message();
  }
}

TEST(DaemonConfigTest, MetricsHistogramsKey) {
  EXPECT_TRUE(DaemonConfig{}.latency_histograms);
  DaemonConfig c;
  ASSERT_TRUE(ApplyYaml("metrics:\n  histograms: false\n", "test.yaml", c).ok());
  EXPECT_FALSE(c.latency_histograms);
  DaemonConfig bad;
  Status st = ApplyYaml("metrics:\n  histograms: sometimes\n", "test.yaml", bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("metrics.histograms"), std::string::npos) << st.message();
}

TEST(DaemonConfigTest, MetricsHistoryKeys) {
  const DaemonConfig defaults;
  EXPECT_TRUE(defaults.history);
  EXPECT_EQ(defaults.history_interval_ms * defaults.history_samples, 6ull * 3600 * 1000);
  DaemonConfig c;
  ASSERT_TRUE(ApplyYaml("metrics:\n  history: false\n  history_interval_ms: 1000\n"
                        "  history_samples: 60\n",
                        "test.yaml", c)
                  .ok());
  EXPECT_FALSE(c.history);
  EXPECT_EQ(c.history_interval_ms, 1000u);
  EXPECT_EQ(c.history_samples, 60u);
  DaemonConfig fast;
  fast.unix_path = "/tmp/s";
  fast.history_interval_ms = 10;
  EXPECT_NE(Finalize(fast).message().find("metrics.history_interval_ms"), std::string::npos);
  fast.history = false;  // the interval of a history that is off is not checked
  EXPECT_TRUE(Finalize(fast).ok());
  DaemonConfig one;
  one.unix_path = "/tmp/s";
  one.history_samples = 1;
  EXPECT_NE(Finalize(one).message().find("metrics.history_samples"), std::string::npos);
  DaemonConfig big;
  EXPECT_FALSE(ApplyYaml("metrics:\n  history_samples: 100001\n", "test.yaml", big).ok());
}

// Both listeners bind an address (or "localhost"); a name is refused before anything opens, not
// when HTTP fails to start after the tiers did.
TEST(DaemonConfigTest, ListenHostsAreAddressesOrLocalhost) {
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.http_host = "localhost";
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_EQ(c.http_host, "127.0.0.1");
  DaemonConfig v6;
  v6.unix_path = "/tmp/s";
  v6.http_host = "::1";
  EXPECT_TRUE(Finalize(v6).ok());
  DaemonConfig named;
  named.unix_path = "/tmp/s";
  named.http_host = "metrics.example";
  Status refused = Finalize(named);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("listen.http_host"), std::string::npos) << refused.ToString();
  DaemonConfig tcp;
  tcp.unix_path = "/tmp/s";
  tcp.tcp_host = "kvtier.internal";
  EXPECT_NE(Finalize(tcp).message().find("listen.tcp_host"), std::string::npos);
}

// auto resolves to today's share of the free space and is marked so: a tier formatted earlier
// keeps its own size rather than being reformatted whenever the free space moves.
TEST(DaemonConfigTest, AnAutomaticNvmeSizeIsMarkedAsADefault) {
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.data_dir = "/tmp";
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_TRUE(c.nvme_bytes_auto);
  EXPECT_NE(c.nvme_bytes, DaemonConfig::kAutoBytes);  // resolved to a figure
}

// Regression: nvme.write_through was taken with no NVMe tier (nvme.bytes 0, or auto finding too
// little free space), and every put answered OK with nothing durable.
TEST(DaemonConfigTest, WriteThroughNeedsAnNvmeTier) {
  const std::string file = WriteConfig("write_through.yaml", "nvme: {write_through: true}\n");
  auto r = Parse({"--config", file.c_str(), "--nvme-bytes", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("nvme.write_through"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("nvme.bytes is 0"), std::string::npos)
      << r.status().message();
  // /proc has no free space: auto resolves to 0, and the error says why.
  r = Parse({"--config", file.c_str(), "--data-dir", "/proc/kvtier-test"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nvme.write_through"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("free on the file system of /proc"), std::string::npos)
      << r.status().message();
  // A rule across keys names the file as well as the key.
  EXPECT_NE(r.status().message().find("(--config " + file + " and the flags)"), std::string::npos)
      << r.status().message();
  r = Parse({"--config", file.c_str(), "--nvme-bytes", "64MiB"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->config.nvme_write_through);
}

// The log says how auto was resolved, and when it gives no tier, which file system was too full.
TEST(DaemonConfigTest, AnAutomaticNvmeSizeSaysHowItWasResolved) {
  const AutoNvmeSize none = AutoNvmeBytes("/proc/kvtier-test/data");
  EXPECT_EQ(none.bytes, 0u);
  EXPECT_NE(none.note.find("nvme.bytes auto: 0, no NVMe tier"), std::string::npos) << none.note;
  EXPECT_NE(none.note.find("free on the file system of /proc "), std::string::npos) << none.note;
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.data_dir = ::testing::TempDir();
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_NE(c.nvme_bytes_note.find("nvme.bytes auto: "), std::string::npos) << c.nvme_bytes_note;
  EXPECT_NE(c.nvme_bytes_note.find(::testing::TempDir()), std::string::npos) << c.nvme_bytes_note;
}

// Regression: auto was sized from the free space alone, where a tier formatted at an earlier start
// takes room of its own: once the disk had filled up, the next start sized the tier at 0 and
// turned it off (its blocks, write-through ones included, unread; with write-through the start
// refused). The tier's own files count as room.
TEST(DaemonConfigTest, AnAutomaticNvmeSizeCountsTheTiersOwnFilesAsRoom) {
  const std::string data = ::testing::TempDir() + "/auto-own";
  std::filesystem::create_directories(data + "/nvme");
  const std::string file = data + "/nvme/kvtier-nvme.data";
  {
    const int fd = open(file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(posix_fallocate(fd, 0, 64 << 20), 0);
    close(fd);
  }
  const AutoNvmeSize own = AutoNvmeBytes(data);
  EXPECT_NE(own.note.find("(64.0 MiB of it the tier's own files)"), std::string::npos) << own.note;
  const AutoNvmeSize path = AutoNvmeBytes("/proc/kvtier-test", {file});
  EXPECT_NE(path.note.find("(64.0 MiB of it the tier's own files)"), std::string::npos)
      << path.note;
  std::filesystem::remove_all(data);
}

// Regression: with nvme.paths, auto was sized from the data directory's file system, where the
// blocks do not go: the tier was off when that one was small, or the paths' disks got a tenth of
// another disk's free space.
TEST(DaemonConfigTest, AnAutomaticNvmeSizeMeasuresWhereThePathsAre) {
  const std::string disk = ::testing::TempDir() + "/auto-disk";
  std::filesystem::create_directories(disk);
  // The data directory has no room (/proc), the path's file system has.
  const AutoNvmeSize on_disk = AutoNvmeBytes("/proc/kvtier-test", {disk + "/blocks.data"});
  EXPECT_NE(on_disk.note.find("free on the file system of " + disk), std::string::npos)
      << on_disk.note;
  EXPECT_EQ(on_disk.note.find("/proc"), std::string::npos) << on_disk.note;
  // The other way round: the path's file system has no room, so there is no tier.
  const AutoNvmeSize no_room = AutoNvmeBytes(disk, {"/proc/kvtier-test/blocks.data"});
  EXPECT_EQ(no_room.bytes, 0u);
  EXPECT_NE(no_room.note.find("free on the file system of /proc "), std::string::npos)
      << no_room.note;
  // Two paths on one file system share its tenth.
  const AutoNvmeSize two = AutoNvmeBytes(disk, {disk + "/a.data", disk + "/b.data"});
  EXPECT_NE(two.note.find("times 2"), std::string::npos) << two.note;
  EXPECT_EQ(two.bytes % (1ull << 20), 0u);
  // Finalize takes the paths into account.
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.data_dir = disk;
  c.nvme_paths = {"/proc/kvtier-test/blocks.data"};
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_EQ(c.nvme_bytes, 0u);
  EXPECT_NE(c.nvme_bytes_note.find("/proc"), std::string::npos) << c.nvme_bytes_note;
}

TEST(DaemonConfigTest, NvmeKeysAndFlags) {
  const char* argv[] = {"kvtierd", "--nvme-bytes", "2GiB", "--cold-start", "--data-dir", "/tmp/x"};
  auto r = ParseCommandLine(6, argv);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.nvme_bytes, 2ull << 30);
  EXPECT_TRUE(r->config.cold_start);

  const char* off[] = {"kvtierd", "--nvme-bytes", "0"};
  r = ParseCommandLine(3, off);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.nvme_bytes, 0u);

  DaemonConfig c;
  ASSERT_TRUE(ApplyYaml("nvme:\n  bytes: 1GiB\n  admission: reused\n  paths: [/dev/a, /dev/b]\n"
                        "placement:\n  high_watermark: 0.8\n  low_watermark: 0.5\n"
                        "  when_disk_lags: wait\n  mover_cpu_priority: normal\n"
                        "  nvme_copy_share: 0\n",
                        "test.yaml", c)
                  .ok());
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_EQ(c.nvme_bytes, 1ull << 30);
  EXPECT_FALSE(c.nvme_bytes_auto);  // a size asked for is the size: another one reformats
  EXPECT_EQ(c.nvme_admission, "reused");
  EXPECT_EQ(c.nvme_paths, (std::vector<std::string>{"/dev/a", "/dev/b"}));
  EXPECT_EQ(c.low_watermark, 0.5);
  EXPECT_EQ(c.when_disk_lags, "wait");
  EXPECT_EQ(c.mover_cpu_priority, "normal");
  EXPECT_EQ(DaemonConfig{}.mover_cpu_priority, "low");
  EXPECT_EQ(c.nvme_copy_share, 0.0);  // a share may be none
  EXPECT_EQ(DaemonConfig{}.nvme_copy_share, 0.125);
}

TEST(DaemonConfigTest, AvailableMemoryIsMemAvailableNotMemFree) {
  EXPECT_EQ(MemAvailableBytes("MemTotal:       16000000 kB\nMemFree:          500000 kB\n"
                              "MemAvailable:    9000000 kB\nBuffers:          100 kB\n"),
            9000000ull << 10);
  EXPECT_EQ(MemAvailableBytes("MemTotal:       16000000 kB\nMemFree:          500000 kB\n"),
            std::nullopt);
  EXPECT_EQ(MemAvailableBytes(""), std::nullopt);
}

// A huge-page arena takes the pool's free pages, which MemAvailable leaves out.
TEST(DaemonConfigTest, FreeHugePagesAreCountedFromThePool) {
  EXPECT_EQ(FreeHugePageBytes("MemAvailable:    9000000 kB\nHugePages_Total:     512\n"
                              "HugePages_Free:      500\nHugePages_Rsvd:       20\n"
                              "Hugepagesize:       2048 kB\n"),
            480ull * (2048ull << 10));  // reserved pages are promised to others
  EXPECT_EQ(FreeHugePageBytes("MemAvailable:    9000000 kB\n"), 0u);
  const HostMemory now = HostMemoryNow(false);
  EXPECT_GT(now.available, 0u);
  EXPECT_GE(now.total, now.available);
}

// Whole numbers are read as YAML 1.2 writes them: a leading zero is still decimal.
TEST(DaemonConfigTest, WholeNumbersAreDecimalHexOrOctalAsYamlSays) {
  for (const auto& [text, want] :
       {std::pair{"010", 10u}, {"0x20", 32u}, {"0o20", 16u}, {"7", 7u}}) {
    DaemonConfig c;
    ASSERT_TRUE(ApplyYaml(std::string("nvme:\n  queue_depth: ") + text + "\n", "t.yaml", c).ok())
        << text;
    EXPECT_EQ(c.nvme_queue_depth, want) << text;
  }
  for (const char* bad : {"0x", "0o8", "1e3", "+4", "-1", "0xg"}) {
    DaemonConfig c;
    const Status st = ApplyYaml(std::string("nvme:\n  queue_depth: ") + bad + "\n", "t.yaml", c);
    EXPECT_NE(st.message().find("nvme.queue_depth"), std::string::npos)
        << bad << ": " << st.ToString();
  }
}

TEST(DaemonConfigTest, BadNvmeSettingsNameTheirKey) {
  const char* flag[] = {"kvtierd", "--nvme-bytes", "12furlongs"};
  auto r = ParseCommandLine(3, flag);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--nvme-bytes"), std::string::npos) << r.status().message();
  struct Case {
    const char* yaml;
    const char* key;
  } cases[] = {
      {"nvme:\n  io_backend: spdk\n", "nvme.io_backend"},
      {"nvme:\n  admission: sometimes\n", "nvme.admission"},
      {"nvme:\n  bytes: 1MiB\n", "nvme.bytes"},
      {"nvme:\n  queue_depth: 0\n", "nvme"},
      {"placement:\n  high_watermark: 1.5\n", "placement.high_watermark"},
      {"placement:\n  when_disk_lags: panic\n", "placement.when_disk_lags"},
      {"placement:\n  mover_cpu_priority: idle\n", "placement.mover_cpu_priority"},
      {"placement:\n  nvme_copy_share: 1.5\n", "placement.nvme_copy_share"},
      {"placement:\n  nvme_copy_share: -0.1\n", "placement.nvme_copy_share"},
      {"placement:\n  high_watermark: 0.5\n  low_watermark: 0.6\n", "placement.low_watermark"},
      {"nvme:\n  flavour: fast\n", "nvme.flavour"},
  };
  for (const Case& c : cases) {
    DaemonConfig config;
    Status st = ApplyYaml(c.yaml, "test.yaml", config);
    if (st.ok()) st = Finalize(config);
    ASSERT_FALSE(st.ok()) << c.yaml;
    EXPECT_NE(st.message().find(c.key), std::string::npos) << st.message();
  }
}

TEST(DaemonConfigTest, GpuKeysAndFlags) {
  auto r = Parse({"--gpu-bytes", "64MiB"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.gpu_bytes, 64ull << 20);
  r = Parse({"--gpu-bytes", "0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.gpu_bytes, 0u);
  r = Parse({"--gpu-bytes", "auto"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.gpu_bytes, DaemonConfig::kAutoBytes);

  DaemonConfig c;
  c.unix_path = "/tmp/s";
  ASSERT_TRUE(ApplyYaml("gpu:\n  bytes: 1GiB\n  device: 1\n  fake: true\n  copy_lanes: 2\n"
                        "  promotion: off\n  promote_after_reads: 3\n  promote_window_ms: 500\n"
                        "  detach_timeout_ms: 250\n",
                        "test.yaml", c)
                  .ok());
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_EQ(c.gpu_bytes, 1ull << 30);
  EXPECT_EQ(c.gpu_device, 1u);
  EXPECT_TRUE(c.gpu_fake);
  EXPECT_EQ(c.gpu_copy_lanes, 2u);
  EXPECT_EQ(c.gpu_promotion, "off");
  EXPECT_EQ(c.gpu_promote_after_reads, 3u);
  EXPECT_EQ(c.gpu_promote_window_ms, 500u);
  EXPECT_EQ(c.gpu_detach_timeout_ms, 250u);
}

TEST(DaemonConfigTest, BadGpuSettingsNameTheirKey) {
  auto r = Parse({"--gpu-bytes", "lots"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--gpu-bytes"), std::string::npos) << r.status().message();
  struct Case {
    const char* yaml;
    const char* key;
  } cases[] = {
      // The fake has no device to size "auto" from.
      {"gpu:\n  fake: true\n", "gpu.fake"},
      {"gpu:\n  fake: maybe\n", "gpu.fake"},
      {"gpu:\n  bytes: 4KiB\n", "gpu.bytes"},
      {"gpu:\n  bytes: 12 furlongs\n", "gpu.bytes"},
      {"gpu:\n  device: -1\n", "gpu.device"},
      {"gpu:\n  copy_lanes: 0\n", "gpu.copy_lanes"},
      {"gpu:\n  promotion: hottest\n", "gpu.promotion"},
      {"gpu:\n  promote_after_reads: 0\n", "gpu.promote_after_reads"},
      {"gpu:\n  promote_after_reads: 256\n", "gpu.promote_after_reads"},
      {"gpu:\n  promote_window_ms: 0\n", "gpu.promote_window_ms"},
      {"gpu:\n  lanes: 2\n", "gpu.lanes"},
  };
  for (const Case& c : cases) {
    DaemonConfig config;
    config.unix_path = "/tmp/s";
    Status st = ApplyYaml(c.yaml, "test.yaml", config);
    if (st.ok()) st = Finalize(config);
    ASSERT_FALSE(st.ok()) << c.yaml;
    EXPECT_NE(st.message().find(c.key), std::string::npos) << st.message();
  }
}

// Regression: a directory (a trailing slash, a mistyped path) opened and read as empty, so
// kvtierd ran on its embedded defaults and said nothing.
TEST(DaemonConfigTest, AConfigThatIsNotARegularFileIsRefused) {
  const std::string dir = ::testing::TempDir() + "/config-dir/";
  std::filesystem::create_directories(dir);
  auto r = Parse({"--config", dir.c_str()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "--config: '" + dir + "' is not a regular file");
  r = Parse({"--config", "/dev/null"});  // a character device
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos);
  const std::string missing = ::testing::TempDir() + "/no-such-config.yaml";
  r = Parse({"--config", missing.c_str()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("cannot read '" + missing + "'"), std::string::npos);
  // An empty regular file is a valid (empty) configuration.
  const std::string empty = WriteConfig("empty.yaml", "");
  EXPECT_TRUE(Parse({"--config", empty.c_str()}).ok());
}

TEST(DaemonConfigTest, RemoteTierIsOffByDefault) {
  auto r = Parse({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->config.remote_url.empty());
  EXPECT_FALSE(r->config.remote_write_through);
}

TEST(DaemonConfigTest, RemoteFlagAndKeys) {
  const std::string file = WriteConfig("remote.yaml",
                                       "remote:\n  password: from-file\n  ttl_seconds: 600\n"
                                       "  lookup_timeout_ms: 15\n  timeout_ms: 250\n"
                                       "  write_through: true\n");
  auto r = Parse({"--config", file.c_str(), "--remote", "redis://alice@127.0.0.1:7000,[::1]:7001"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DaemonConfig& c = r->config;
  EXPECT_EQ(c.remote_url, "redis://alice@127.0.0.1:7000,[::1]:7001");
  EXPECT_EQ(c.remote_user, "alice");  // taken from the URL
  EXPECT_EQ(c.remote_password, "from-file");
  EXPECT_EQ(c.remote_ttl_seconds, 600u);
  EXPECT_EQ(c.remote_lookup_timeout_ms, 15u);
  EXPECT_EQ(c.remote_timeout_ms, 250u);
  EXPECT_TRUE(c.remote_write_through);
}

TEST(DaemonConfigTest, RemoteTlsKeys) {
  const std::string file = WriteConfig("remote_tls.yaml",
                                       "remote:\n  tls_ca_file: /etc/ca.crt\n"
                                       "  tls_cert_file: /etc/c.crt\n  tls_key_file: /etc/c.key\n"
                                       "  tls_server_name: redis.internal\n");
  auto r = Parse({"--config", file.c_str(), "--remote", "rediss://10.0.0.1:6380"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.remote_tls_ca_file, "/etc/ca.crt");
  EXPECT_EQ(r->config.remote_tls_cert_file, "/etc/c.crt");
  EXPECT_EQ(r->config.remote_tls_key_file, "/etc/c.key");
  EXPECT_EQ(r->config.remote_tls_server_name, "redis.internal");
}

TEST(DaemonConfigTest, RemotePasswordFromTheEnvironmentOverridesTheFile) {
  const std::string file = WriteConfig("remote_env.yaml", "remote:\n  password: from-file\n");
  ASSERT_EQ(setenv(kRemotePasswordEnv, "from-env", 1), 0);
  auto r = Parse({"--config", file.c_str(), "--remote", "127.0.0.1:7000"});
  unsetenv(kRemotePasswordEnv);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.remote_password, "from-env");
}

// Regression: the deploy files passed the password as --password "$KVTIER_PASSWORD", where every
// user of the node reads it (/proc/PID/cmdline). The environment variable is read itself.
TEST(DaemonConfigTest, ListenPasswordFromTheEnvironmentOverridesTheFile) {
  ASSERT_EQ(setenv(kPasswordEnv, "from-env", 1), 0);
  auto r = Parse({"--unix", "/tmp/s", "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.password, "from-env");
  // It lets a network listener start, as a configured password does.
  const std::string network = WriteConfig("net.yaml", "listen: {tcp_host: 0.0.0.0}\n");
  r = Parse({"--config", network.c_str(), "--nvme-bytes", "0"});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  // The flag, else the environment, else the file: as KVTIER_REMOTE_PASSWORD and the kvtier CLI.
  const std::string file = WriteConfig("listen_pw.yaml", "listen: {password: from-file}\n");
  r = Parse({"--config", file.c_str(), "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.password, "from-env");
  r = Parse({"--config", file.c_str(), "--password", "from-flag", "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.password, "from-flag");
  // An empty variable sets nothing (as KVTIER_REMOTE_PASSWORD's).
  ASSERT_EQ(setenv(kPasswordEnv, "", 1), 0);
  r = Parse({"--config", file.c_str(), "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config.password, "from-file");
  unsetenv(kPasswordEnv);
  r = Parse({"--config", network.c_str(), "--nvme-bytes", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("listen.tcp_host"), std::string::npos);
}

TEST(DaemonConfigTest, RemotePasswordIsNeverAFlagNorRepeatedInAnError) {
  EXPECT_FALSE(Parse({"--remote", "127.0.0.1:7000", "--remote-password", "pw"}).ok());
  auto r = Parse({"--remote", "redis://alice:s3cret@127.0.0.1:7000"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("remote.url"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find("s3cret"), std::string::npos) << r.status().message();
}

TEST(DaemonConfigTest, BadRemoteSettingsNameTheirKey) {
  auto expect_error = [](const std::string& yaml, const std::string& key) {
    DaemonConfig c;
    ASSERT_TRUE(ApplyYaml(yaml, "test.yaml", c).ok()) << yaml;
    Status st = Finalize(c);
    ASSERT_FALSE(st.ok()) << yaml;
    EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
  };
  expect_error("remote: {url: 'http://h:1'}", "remote.url");
  expect_error("remote: {url: 'h:0'}", "remote.url");
  expect_error("remote: {password: pw}", "remote.url");
  expect_error("remote: {url: 'redis://bob@h:1', user: alice}", "remote.user");
  expect_error("remote: {url: 'h:1', ttl_seconds: 0}", "remote.ttl_seconds");
  expect_error("remote: {url: 'h:1', lookup_timeout_ms: 0}", "remote.lookup_timeout_ms");
  expect_error("remote: {url: 'h:1', timeout_ms: 0}", "remote.timeout_ms");
  expect_error("remote: {url: 'h:1', lookup_timeout_ms: 1000, timeout_ms: 1000}",
               "must be below remote.timeout_ms");
  expect_error("remote: {url: 'redis://h:1', tls_ca_file: ca.crt}", "rediss://");
  expect_error("remote: {url: 'rediss://h:1', tls_cert_file: c.crt}", "remote.tls_key_file");
  DaemonConfig c;
  EXPECT_FALSE(ApplyYaml("remote: {ttl_seconds: soon}", "test.yaml", c).ok());
}

TEST(DaemonConfigTest, QuotasPerTenantAndNamespace) {
  DaemonConfig c;
  EXPECT_TRUE(c.quotas.empty());
  const std::string ns = "0123456789abcdef0123456789ABCDEF";
  ASSERT_TRUE(ApplyYaml("quotas:\n"
                        "  tenants:\n"
                        "    acme.corp: {host: 8GiB, nvme: 100GiB}\n"
                        "  namespaces:\n"
                        "    " +
                            ns + ": {gpu: 512MiB}\n",
                        "test.yaml", c)
                  .ok());
  ASSERT_EQ(c.quotas.size(), 3u);
  EXPECT_FALSE(c.quotas[0].is_namespace);
  EXPECT_EQ(c.quotas[0].subject, "acme.corp");  // a dot in a salt is not a key path
  EXPECT_EQ(c.quotas[0].tier, TierId::kHost);
  EXPECT_EQ(c.quotas[0].bytes, 8ull << 30);
  EXPECT_EQ(c.quotas[1].tier, TierId::kNvme);
  EXPECT_TRUE(c.quotas[2].is_namespace);
  EXPECT_EQ(c.quotas[2].subject, ns);
  EXPECT_EQ(c.quotas[2].tier, TierId::kGpu);
  EXPECT_EQ(c.quotas[2].bytes, 512ull << 20);
  c.gpu_bytes = DaemonConfig::kAutoBytes;
  c.nvme_bytes = 1ull << 30;
  ASSERT_TRUE(Finalize(c).ok());

  auto expect_error = [](const std::string& yaml, const std::string& key) {
    DaemonConfig bad;
    Status st = ApplyYaml(yaml, "test.yaml", bad);
    ASSERT_FALSE(st.ok()) << yaml;
    EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
  };
  expect_error("quotas: {users: {a: {host: 1GiB}}}", "quotas.users");
  expect_error("quotas: {tenants: {a: {disk: 1GiB}}}", "quotas.tenants.a.disk: unknown tier");
  expect_error("quotas: {tenants: {a: {host: lots}}}", "quotas.tenants.a.host");
  expect_error("quotas: {tenants: {a: 1GiB}}", "quotas.tenants.a: expected sizes per tier");
  expect_error("quotas: {namespaces: {abc: {host: 1GiB}}}", "quotas.namespaces.abc");
  expect_error("quotas: [1, 2]", "quotas: expected tenants and namespaces");
}

// Regression: a quota in a tier that is off was found only after the tiers had opened (the NVMe
// file preallocated), and the start failed with 1 rather than the config error's 2.
TEST(DaemonConfigTest, AQuotaInATierThatIsOffIsAConfigError) {
  const std::string file =
      WriteConfig("quota_gpu.yaml", "quotas: {tenants: {acme: {gpu: 1GiB}}}\n");
  auto r = Parse({"--config", file.c_str(), "--nvme-bytes", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("quotas.tenants.acme.gpu: no gpu tier"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("gpu.bytes is 0"), std::string::npos);
  EXPECT_TRUE(Parse({"--config", file.c_str(), "--nvme-bytes", "0", "--gpu-bytes", "auto"}).ok());

  const std::string ns = "0123456789abcdef0123456789abcdef";
  const std::string nvme =
      WriteConfig("quota_nvme.yaml", "quotas: {namespaces: {" + ns + ": {nvme: 1GiB}}}\n");
  r = Parse({"--config", nvme.c_str(), "--nvme-bytes", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("quotas.namespaces." + ns + ".nvme: no nvme tier"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(Parse({"--config", nvme.c_str(), "--nvme-bytes", "64MiB"}).ok());
  const std::string host = WriteConfig("quota_host.yaml", "quotas: {tenants: {a: {host: 1GiB}}}\n");
  EXPECT_TRUE(Parse({"--config", host.c_str(), "--nvme-bytes", "0"}).ok());
}

// Regression: a socket path longer than a Unix socket address holds was refused only at bind,
// after the tiers had opened.
TEST(DaemonConfigTest, AUnixSocketPathMustFitTheAddress) {
  const std::string longest = "/tmp/" + std::string(102, 's');  // 107 bytes
  EXPECT_TRUE(Parse({"--unix", longest.c_str(), "--nvme-bytes", "0"}).ok());
  const std::string too_long = longest + "s";
  auto r = Parse({"--unix", too_long.c_str(), "--nvme-bytes", "0"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("listen.unix"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("at most 107"), std::string::npos) << r.status().message();
}

// Regression: limits.max_bulk_bytes above 1GiB had no effect, since a whole command was held to
// a fixed 1GiB: a 1.5GB SET was refused as "too big command".
TEST(DaemonConfigTest, TheCommandLimitMakesRoomForTheLargestValue) {
  DaemonConfig c;
  c.unix_path = "/tmp/s";
  c.nvme_bytes = 0;
  ASSERT_TRUE(Finalize(c).ok());
  EXPECT_EQ(c.max_command_bytes, kDefaultMaxCommandBytes);  // the default stays

  const std::string file = WriteConfig("big_bulk.yaml", "limits: {max_bulk_bytes: 1500MB}\n");
  auto r = Parse({"--config", file.c_str(), "--nvme-bytes", "0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config.max_bulk_bytes, 1'500'000'000u);
  // A SET of the largest value with the longest key fits.
  EXPECT_GE(r->config.max_command_bytes, r->config.max_bulk_bytes + r->config.max_key_bytes + 64);
  EXPECT_LE(r->config.max_command_bytes, r->config.max_bulk_bytes + (1u << 20));

  EXPECT_EQ(MaxCommandBytes(UINT64_MAX - 10, 64 << 10), UINT64_MAX);
}

TEST(DaemonConfigTest, HelpListsEveryConfigKey) {
  auto r = Parse({"--help"});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->help_requested);
  for (const char* text :
       {"--gpu-bytes",
        "gpu: bytes, copy_lanes, detach_timeout_ms, device, fake, "
        "promote_after_reads, promote_window_ms, promotion",
        "nvme:", "allowed_uids", "quotas: tenants.<salt>.<tier>, namespaces.<id>.<tier>"}) {
    EXPECT_NE(r->help_text.find(text), std::string::npos) << text << " in\n" << r->help_text;
  }
}

}  // namespace
}  // namespace kvtier::config

namespace kvtier::config {
namespace {

// A fake /sys/fs/cgroup: files written under a temporary root.
class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("kvtier-cgroup-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text << "\n";
  }
  std::filesystem::path root_;
};

TEST_F(CgroupTest, V2TakesTheTightestLimitOnThePathUp) {
  Write("kubepods/pod1/memory.max", "8589934592");  // the pod: 8 GiB, 6 GiB used
  Write("kubepods/pod1/memory.current", "6442450944");
  Write("kubepods/pod1/ctr/memory.max", "max");  // the container itself: no limit of its own
  Write("kubepods/pod1/ctr/memory.current", "6442450944");
  EXPECT_EQ(CgroupMemoryRoom(root_, "0::/kubepods/pod1/ctr\n"), 2ull << 30);
  EXPECT_EQ(CgroupMemoryLimit(root_, "0::/kubepods/pod1/ctr\n"), 8ull << 30);  // the limit alone
}

TEST_F(CgroupTest, InsideANamespaceTheRootIsTheContainersOwn) {
  Write("memory.max", "1073741824");
  Write("memory.current", "0");
  EXPECT_EQ(CgroupMemoryRoom(root_, "0::/\n"), 1ull << 30);
}

TEST_F(CgroupTest, V1UsesTheMemoryController) {
  Write("memory/docker/abc/memory.limit_in_bytes", "2147483648");
  Write("memory/docker/abc/memory.usage_in_bytes", "1073741824");
  Write("memory/memory.limit_in_bytes", "9223372036854771712");  // v1's "no limit"
  EXPECT_EQ(CgroupMemoryRoom(root_, "5:cpu:/docker/abc\n4:memory:/docker/abc\n"), 1ull << 30);
  EXPECT_EQ(CgroupMemoryLimit(root_, "5:cpu:/docker/abc\n4:memory:/docker/abc\n"), 2ull << 30);
}

// The inactive file cache (an engine's weights read through the page cache) is reclaimed before
// the limit bites: it does not count as used, as in the kubelet's working set.
TEST_F(CgroupTest, TheInactiveFileCacheIsRoom) {
  Write("kubepods/pod1/memory.max", "8589934592");      // 8 GiB
  Write("kubepods/pod1/memory.current", "6442450944");  // 6 GiB, 4 of them inactive file cache
  Write("kubepods/pod1/memory.stat",
        "anon 2147483648\nfile 4294967296\nactive_file 0\n"
        "inactive_file 4294967296\n");
  EXPECT_EQ(CgroupMemoryRoom(root_, "0::/kubepods/pod1\n"), 6ull << 30);
  Write("memory/docker/abc/memory.limit_in_bytes", "2147483648");
  Write("memory/docker/abc/memory.usage_in_bytes", "2147483648");
  Write("memory/docker/abc/memory.stat", "cache 1073741824\ntotal_inactive_file 1073741824\n");
  EXPECT_EQ(CgroupMemoryRoom(root_, "4:memory:/docker/abc\n"), 1ull << 30);
}

TEST_F(CgroupTest, NoLimitOrNothingReadableIsNoAnswer) {
  Write("user.slice/memory.max", "max");
  EXPECT_FALSE(CgroupMemoryRoom(root_, "0::/user.slice\n").has_value());
  EXPECT_FALSE(CgroupMemoryRoom(root_ / "missing", "0::/a/b\n").has_value());
  EXPECT_FALSE(CgroupMemoryRoom(root_, "").has_value());
}

}  // namespace
}  // namespace kvtier::config

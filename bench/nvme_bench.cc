// kvtier_nvme_bench: the NVMe tier against fio on the same file system, plus its write
// amplification and warm-restart figures. bench/nvme_bench.sh runs fio first (2 MiB blocks,
// io_uring, O_DIRECT, the same queue depth) and passes its bandwidths in; see bench/README.md.
//
// The tier runs with `qd` threads, each writing or reading whole 2 MiB blocks from its own slot of
// a registered "arena" buffer, so `qd` blocks are in flight at once, as fio's iodepth.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "tiers/nvme/aligned_buffer.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::bench {
namespace {

using tiers::BlockIdentity;
using tiers::nvme::AlignedBuffer;
using tiers::nvme::NvmeTier;

constexpr uint64_t kMiB = 1 << 20;

struct Args {
  std::string dir = "/tmp";
  uint64_t blocks = 512;
  uint64_t block_bytes = 2 * kMiB;
  uint32_t qd = 8;
  uint64_t small_blocks = 50000;
  double fio_write_kibps = 0;
  double fio_read_kibps = 0;
  bool restart_time = true;  // --no-restart skips restart_seconds_per_million_blocks
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--no-restart") {
      a.restart_time = false;
      continue;
    }
    if (i + 1 == argc) break;
    const char* v = argv[i + 1];
    if (k == "--dir")
      a.dir = v;
    else if (k == "--blocks")
      a.blocks = std::strtoull(v, nullptr, 10);
    else if (k == "--qd")
      a.qd = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--small-blocks")
      a.small_blocks = std::strtoull(v, nullptr, 10);
    else if (k == "--fio-write-kibps")
      a.fio_write_kibps = std::strtod(v, nullptr);
    else if (k == "--fio-read-kibps")
      a.fio_read_kibps = std::strtod(v, nullptr);
    else
      continue;
    ++i;
  }
  if (QuickMode(argc, argv)) a.small_blocks = std::min<uint64_t>(a.small_blocks, 5000);
  return a;
}

BlockIdentity Id(uint64_t i) { return {NamespaceId{{1, 1}}, BlockKey{{i, i}}}; }

NvmeTier::Options TierOptions(const std::string& dir, uint64_t capacity, uint32_t qd) {
  NvmeTier::Options o;
  o.data_dir = dir;
  o.capacity_bytes = capacity;
  o.io.kind = tiers::nvme::IoBackendKind::kIoUring;
  // Throughput: one ring per thread, each holding one block's header and payload requests, so
  // qd blocks are in flight. Restart (qd 1): the default depth, as the daemon runs it.
  o.io.queue_depth = qd > 1 ? 4 : tiers::nvme::IoBackendConfig{}.queue_depth;
  o.io.ring_count = qd;
  o.record_access_on_read = false;
  return o;
}

// Runs `fn(thread, block)` for every block, spread over `threads` threads; returns seconds.
template <typename Fn>
double Parallel(uint32_t threads, uint64_t blocks, Fn fn) {
  std::vector<std::thread> pool;
  double start = NowSeconds();
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (uint64_t i = t; i < blocks; i += threads) fn(t, i);
    });
  }
  for (auto& th : pool) th.join();
  return NowSeconds() - start;
}

void Throughput(const Args& a) {
  std::string dir = a.dir + "/tier";
  uint64_t capacity = a.blocks * tiers::nvme::ExtentFootprint(a.block_bytes) + 64 * kMiB;
  AlignedBuffer arena(a.qd * a.block_bytes);
  for (size_t i = 0; i < arena.size(); ++i) arena.data()[i] = std::byte(i * 31);
  NvmeTier::Options o = TierOptions(dir, capacity, a.qd);
  o.cold_start = true;
  o.registered_region = arena.data();
  o.registered_region_bytes = arena.size();
  auto opened = NvmeTier::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "nvme_bench: %s\n", opened.status().ToString().c_str());
    std::exit(1);
  }
  NvmeTier& tier = **opened;
  std::vector<Extent> extents;
  for (uint64_t i = 0; i < a.blocks; ++i) extents.push_back(*tier.Allocate(a.block_bytes));
  std::atomic<uint64_t> errors{0};
  auto slot = [&](uint32_t t) {
    return std::span(arena.data() + t * a.block_bytes, a.block_bytes);
  };
  double write_s = Parallel(a.qd, a.blocks, [&](uint32_t t, uint64_t i) {
    if (!tier.WriteBlock(extents[i], Id(i), slot(t)).ok()) ++errors;
  });
  double read_s = Parallel(a.qd, a.blocks, [&](uint32_t t, uint64_t i) {
    if (!tier.ReadBlock(extents[i], Id(i), slot(t)).ok()) ++errors;
  });
  double mib = static_cast<double>(a.blocks * a.block_bytes) / kMiB;
  PrintFigure("nvme_write_mib_per_s", mib / write_s, "MiB/s");
  PrintFigure("nvme_read_mib_per_s", mib / read_s, "MiB/s");
  if (a.fio_write_kibps > 0) {
    PrintFigure("nvme_write_ratio_to_fio", (mib / write_s) / (a.fio_write_kibps / 1024), "ratio");
  }
  if (a.fio_read_kibps > 0) {
    PrintFigure("nvme_read_ratio_to_fio", (mib / read_s) / (a.fio_read_kibps / 1024), "ratio");
  }
  PrintFigure("nvme_write_amplification", tier.nvme_stats().write_amplification(), "ratio");
  if (errors > 0) std::fprintf(stderr, "nvme_bench: %lu I/O errors\n", errors.load());
  opened->reset();
  // Warm restart: every block written before a clean shutdown should be served after it.
  auto again = NvmeTier::Open(TierOptions(dir, capacity, a.qd));
  uint64_t served = 0;
  for (const auto& b : (*again)->TakeRecovered()) {
    if ((*again)->ReadBlock(b.extent, {b.ns, b.key}, slot(0)).ok()) ++served;
  }
  PrintFigure("warm_restart_served_fraction", static_cast<double>(served) / a.blocks, "ratio");
}

// Writes `blocks` 4 KiB blocks to a fresh tier in `dir` and closes it; returns its capacity.
uint64_t FillForRestart(const std::string& dir, uint64_t blocks, uint64_t capacity) {
  NvmeTier::Options o = TierOptions(dir, capacity, 1);
  o.cold_start = true;
  auto tier = NvmeTier::Open(o);
  AlignedBuffer buf(4096);
  for (uint64_t i = 0; i < blocks; ++i) {
    Extent e = *(*tier)->Allocate(4096);
    (void)(*tier)->WriteBlock(e, Id(i), buf.span());
  }
  return capacity;
}

// The fastest of three opens of the tier in `dir`, in seconds; checks what each recovered.
double FastestOpen(const std::string& dir, uint64_t capacity, uint64_t expected) {
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    double start = NowSeconds();
    auto tier = NvmeTier::Open(TierOptions(dir, capacity, 1));
    best = std::min(best, NowSeconds() - start);
    uint64_t recovered = (*tier)->TakeRecovered().size();
    if (recovered != expected) {
      std::fprintf(stderr, "nvme_bench: recovered %lu of %lu\n", recovered, expected);
    }
  }
  return best;
}

// How long a restart with a million small blocks takes: the open of an empty tier (RocksDB and
// the data file, paid once) plus the per-block cost measured over `small_blocks` blocks, scaled
// to a million. Dividing the open time of a few thousand blocks by their count would charge the
// fixed part to every block (a 30 ms open over 5,000 blocks reads as 6 s per million).
void RestartTime(const Args& a) {
  uint64_t capacity = a.small_blocks * tiers::nvme::ExtentFootprint(4096) + kMiB;
  FillForRestart(a.dir + "/restart-empty", 0, capacity);
  FillForRestart(a.dir + "/restart", a.small_blocks, capacity);
  double empty_s = FastestOpen(a.dir + "/restart-empty", capacity, 0);
  double full_s = FastestOpen(a.dir + "/restart", capacity, a.small_blocks);
  double per_block_s = std::max(0.0, full_s - empty_s) / a.small_blocks;
  PrintFigure("restart_open_empty_ms", empty_s * 1e3, "ms");
  PrintFigure("restart_us_per_block", per_block_s * 1e6, "us");
  PrintFigure("restart_seconds_per_million_blocks", empty_s + per_block_s * 1e6, "s");
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Args args = kvtier::bench::Parse(argc, argv);
  kvtier::bench::Throughput(args);
  if (args.restart_time) kvtier::bench::RestartTime(args);
  return 0;
}

// What the GPU promotion policy does on a real workload: the Mooncake conversation trace replayed
// through the production Store over a GPU tier (FakeGpuTier: the same allocator and copy paths as
// the device pool, in host memory) above a host tier, for promotion off and for "reads" with
// after_reads N = 1, 2, 3 and several windows.
//
// Per request, at its trace time (a FakeClock): look the prompt's blocks up (the ready prefix is
// what an engine loads), lease and read every block of that prefix (checking its bytes), put the
// blocks after it, then let the GPU mover drain its candidates, as the daemon's mover does
// between requests that arrive milliseconds apart. Blocks are 4 KiB stand-ins for 512-token KV
// blocks; only counts matter. Figures, one per line ("NAME VALUE UNIT", see bench/README.md):
//   block_hit_ratio_<cfg>        prefix blocks read / blocks asked for
//   gpu_hit_share_<cfg>          prefix blocks read from the GPU tier / prefix blocks read
//   gpu_copies_per_gpu_read_<cfg>  promotions (host -> GPU copies) / blocks read from the GPU:
//                                the PCIe traffic the policy spends per read it serves on-device
//   gpu_copies_per_read_<cfg>    promotions / blocks read: that traffic per read of any tier
// Usage: kvtier_gpu_placement_bench [--quick] [TRACE]  (default tests/data's Mooncake trace;
// --quick replays its first 3,000 requests).
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/clock.h"
#include "daemon/cli/trace_reader.h"
#include "daemon/store/store.h"
#include "tiers/gpu/fake_gpu_tier.h"
#include "tiers/host/host_tier.h"

namespace kvtier::bench {
namespace {

constexpr uint64_t kBlockBytes = 4096;
// The host tier holds about a fifth of the trace's 182,790 distinct blocks, and the GPU tier an
// eighth of that (the default gpu.bytes is an eighth of a device; a host has several times more
// RAM than one device has memory).
constexpr uint64_t kHostBlocks = 36'864;
constexpr uint64_t kGpuBlocks = kHostBlocks / 8;
const NamespaceId kNs{{0x6770, 0x1}};

using cli::TraceRequest;

struct Policy {
  std::string name;  // figure suffix
  placement::GpuPromotionOptions options;
};

struct Outcome {
  uint64_t asked_blocks = 0;
  uint64_t read_blocks = 0;
  uint64_t gpu_reads = 0;
  uint64_t promotions = 0;
  uint64_t wrong_bytes = 0;
  uint64_t errors = 0;
};

BlockKey KeyOf(uint64_t hash_id) { return BlockKey{{0x7ace, hash_id}}; }

// Leases and reads the first `hits` blocks, checking the id each payload starts with.
void ReadPrefix(store::Store& store, const TraceRequest& r, size_t hits,
                std::vector<std::byte>& buf, Outcome& out) {
  for (size_t i = 0; i < hits; ++i) {
    Result<store::Lease> lease = store.Acquire(kNs, KeyOf(r.hash_ids[i]));
    if (!lease.ok()) {
      ++out.errors;
      return;
    }
    Status read = lease->address != nullptr
                      ? (std::memcpy(buf.data(), lease->address, kBlockBytes), Status::Ok())
                      : store.ReadLeased(*lease, buf);
    uint64_t id = 0;
    std::memcpy(&id, buf.data(), sizeof id);
    if (!read.ok()) ++out.errors;
    if (read.ok() && id != r.hash_ids[i]) ++out.wrong_bytes;
    ++out.read_blocks;
    out.gpu_reads += lease->tier == TierId::kGpu ? 1 : 0;
    if (!store.Release(lease->id).ok()) ++out.errors;
  }
}

Outcome Replay(const std::vector<TraceRequest>& trace, const Policy& policy) {
  Outcome out;
  auto host = tiers::HostTier::Create({.capacity_bytes = kHostBlocks * kBlockBytes,
                                       .slab_bytes = 1 << 20,
                                       .alignment = kBlockBytes,
                                       .try_huge_pages = false,
                                       .try_mlock = false});
  auto gpu = tiers::FakeGpuTier::Create({.fake = true,
                                         .capacity_bytes = kGpuBlocks * kBlockBytes,
                                         .slab_bytes = 1 << 20,
                                         .alignment = kBlockBytes});
  if (!host.ok() || !gpu.ok()) {
    std::fprintf(stderr, "tiers: %s %s\n", host.status().ToString().c_str(),
                 gpu.status().ToString().c_str());
    ++out.errors;
    return out;
  }
  FakeClock clock(0);
  store::StoreOptions options;
  options.gpu_promotion = policy.options;
  auto store = store::Store::Create(options, {gpu->get(), host->get()}, clock);
  if (!store.ok() || !(*store)->RegisterNamespace({kNs, 512, kBlockBytes, "trace"}).ok()) {
    ++out.errors;
    return out;
  }
  std::vector<std::byte> buf(kBlockBytes);
  std::vector<BlockKey> keys;
  for (const TraceRequest& r : trace) {
    const uint64_t now_us = r.timestamp_ms * 1000;
    if (now_us > clock.NowMicros()) clock.AdvanceMicros(now_us - clock.NowMicros());
    keys.clear();
    for (uint64_t id : r.hash_ids) keys.push_back(KeyOf(id));
    const size_t hits = (*store)->Lookup(kNs, keys).ready_prefix;
    out.asked_blocks += keys.size();
    ReadPrefix(**store, r, hits, buf, out);
    for (size_t i = hits; i < keys.size(); ++i) {
      std::memcpy(buf.data(), &r.hash_ids[i], sizeof(uint64_t));
      Status put = (*store)->Put(kNs, keys[i], buf);
      if (!put.ok() && put.code() != StatusCode::kAlreadyExists) ++out.errors;
    }
    while ((*store)->PendingPromotions() > 0) (*store)->PromoteCandidates(256);
  }
  for (const auto& t : (*store)->Stats().tiers) {
    if (t.tier == TierId::kHost) out.promotions = t.promotions;
  }
  return out;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using namespace kvtier;
  using namespace kvtier::bench;
  const bool quick = QuickMode(argc, argv);
  std::string path = KVTIER_TRACE_PATH;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") != 0) path = argv[i];
  }
  Result<std::vector<cli::TraceRequest>> trace = cli::ReadTrace(path, quick ? 3000 : 0);
  if (!trace.ok()) {
    std::fprintf(stderr, "%s\n", trace.status().ToString().c_str());
    return 1;
  }
  std::vector<Policy> policies{{"off", {"off", 1, 1}}};
  for (uint32_t n : {1u, 2u, 3u}) {
    for (uint64_t window_s : {10u, 60u, 600u}) {
      policies.push_back({"n" + std::to_string(n) + "_w" + std::to_string(window_s) + "s",
                          {"reads", n, window_s * 1'000'000}});
    }
  }
  uint64_t errors = 0;
  for (const Policy& p : policies) {
    const Outcome o = Replay(*trace, p);
    errors += o.errors + o.wrong_bytes;
    auto ratio = [](uint64_t a, uint64_t b) { return b == 0 ? 0.0 : double(a) / double(b); };
    PrintFigure("block_hit_ratio_" + p.name, ratio(o.read_blocks, o.asked_blocks), "ratio");
    PrintFigure("gpu_hit_share_" + p.name, ratio(o.gpu_reads, o.read_blocks), "ratio");
    PrintFigure("gpu_copies_per_gpu_read_" + p.name, ratio(o.promotions, o.gpu_reads), "ratio");
    PrintFigure("gpu_copies_per_read_" + p.name, ratio(o.promotions, o.read_blocks), "ratio");
  }
  if (errors > 0) {
    std::fprintf(stderr, "%llu errors or wrong payloads\n",
                 static_cast<unsigned long long>(errors));
    return 1;
  }
  return 0;
}

// Benchmarks of a running kvtierd through libkvtier, each against a baseline measured in the same
// run (bench/daemon_bench.sh starts the daemon and passes its URL and pid):
//   idle_client_kib              daemon RSS growth per idle connection (one PING each), in KiB
//   lookup_rpc_8192_keys_us_p50  median round trip of one KVT.LOOKUP of 8,192 present keys
//   shm_put_ratio_to_memcpy      shared-memory Put (RESERVE, copy into the arena, COMMIT) of
//                                2 MiB blocks vs memcpy of the same blocks into a pre-faulted
//                                buffer as large as the working set
//   shm_get_ratio_to_memcpy      shared-memory Get (ACQUIRE, copy out, RELEASE) vs memcpy out of
//                                that buffer
//   shm_put_gib_per_s, shm_get_gib_per_s, memcpy_{put,get}_gib_per_s: the absolute rates
// The shm figures move a working set of 512 MiB (128 MiB with --quick) in calls of 16 blocks,
// each call timed back to back with the memcpy of the same blocks (the order alternating), so
// that both sides of a ratio see the same memory bandwidth, which drifts on a shared machine; the
// lookup repeats 1,000 times (100), the idle figure opens --idle-clients connections (1,000).
// A ratio above 1 means kvtier is faster than its baseline. The daemon's host tier must hold the
// working set (daemon_bench.sh sizes it); evictions during the measured loop are reported on
// stderr, since they would make the figures measure eviction too.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "client/client.h"
#include "hashing/block_hasher.h"

namespace kvtier::bench {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kShmBlockBytes = 2 * kMiB;
// Blocks per Put/Get call: one call carries a prompt's worth of blocks, as an engine would send
// them, so the two round trips of a call are spread over 32 MiB of copying.
constexpr size_t kShmBatch = 16;

struct Flags {
  std::string url;
  pid_t daemon_pid = 0;  // 0: skip idle_client_kib
  size_t idle_clients = 1000;
  bool quick = false;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--quick") {
      flags->quick = true;
    } else if (arg == "--url" && has_value) {
      flags->url = argv[++i];
    } else if (arg == "--pid" && has_value) {
      flags->daemon_pid = static_cast<pid_t>(std::atol(argv[++i]));
    } else if (arg == "--idle-clients" && has_value) {
      flags->idle_clients = static_cast<size_t>(std::atol(argv[++i]));
    } else {
      std::fprintf(stderr, "daemon_bench: unknown or incomplete argument '%s'\n", argv[i]);
      return false;
    }
  }
  if (flags->url.empty()) std::fprintf(stderr, "daemon_bench: --url unix:///path is required\n");
  return !flags->url.empty() && flags->idle_clients > 0;
}

// A namespace of its own for each figure, with a random salt so a rerun never finds old blocks.
Result<client::NamespaceInfo> Register(client::Client& c, std::string_view layout,
                                       uint64_t block_bytes) {
  hashing::NamespaceDescriptor d;
  d.model_id = "kvtier-daemon-bench";
  d.kv_dtype = "int8";
  d.num_layers = d.num_kv_heads = d.head_dim = 1;
  d.tokens_per_block = 16;
  d.layout_tag = std::string(layout);
  d.tenant_salt = std::to_string(std::random_device{}()) + std::to_string(std::random_device{}());
  return c.RegisterNamespace(d, block_bytes);
}

std::vector<BlockKey> MakeKeys(const NamespaceId& ns, uint64_t round, size_t count) {
  std::vector<BlockKey> keys;
  keys.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t id[2] = {round, i};
    keys.push_back(
        hashing::FoldForeignKey(ns, std::span(reinterpret_cast<const std::byte*>(id), sizeof(id))));
  }
  return keys;
}

// The daemon's evicted_blocks total (KVT.STATS).
Result<uint64_t> EvictedBlocks(client::Client& c) {
  KVTIER_ASSIGN_OR_RETURN(std::string stats, c.Stats());
  const auto json = nlohmann::json::parse(stats, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.contains("totals")) return Internal("KVT.STATS: not JSON");
  return json["totals"].value("evicted_blocks", uint64_t{0});
}

// VmRSS of `pid` in KiB, from /proc/<pid>/status.
Result<uint64_t> RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    const char* p = line.c_str() + 6;
    while (*p == ' ' || *p == '\t') ++p;
    uint64_t kib = 0;
    std::from_chars(p, line.c_str() + line.size(), kib);
    return kib;
  }
  return NotFound("no VmRSS in /proc/" + std::to_string(pid) + "/status");
}

// Daemon RSS growth per idle connection. A few connections are opened and closed first, so
// one-time costs (the first client's bookkeeping, thread-local caches) are not charged to the N.
Status IdleClients(const Flags& flags) {
  for (int i = 0; i < 8; ++i) {
    KVTIER_ASSIGN_OR_RETURN(client::Client warm, client::Client::Connect(flags.url));
    KVTIER_RETURN_IF_ERROR(warm.Ping());
  }
  KVTIER_ASSIGN_OR_RETURN(const uint64_t before_kib, RssKib(flags.daemon_pid));
  std::vector<client::Client> idle;
  idle.reserve(flags.idle_clients);
  for (size_t i = 0; i < flags.idle_clients; ++i) {
    KVTIER_ASSIGN_OR_RETURN(client::Client c, client::Client::Connect(flags.url));
    KVTIER_RETURN_IF_ERROR(c.Ping());
    idle.push_back(std::move(c));
  }
  KVTIER_ASSIGN_OR_RETURN(const uint64_t after_kib, RssKib(flags.daemon_pid));
  const double per_client = (static_cast<double>(after_kib) - static_cast<double>(before_kib)) /
                            static_cast<double>(flags.idle_clients);
  PrintFigure("idle_client_kib", per_client, "KiB");
  return Status::Ok();
}

// One KVT.LOOKUP of 8,192 keys, all present (4 KiB blocks, stored first through shared memory,
// so `c` must be attached).
Status LookupRpc(client::Client& c, bool quick) {
  constexpr size_t kKeys = 8192;
  constexpr size_t kBlockBytes = 4096;
  KVTIER_ASSIGN_OR_RETURN(client::NamespaceInfo ns, Register(c, "lookup", kBlockBytes));
  const std::vector<BlockKey> keys = MakeKeys(ns.id, 0, kKeys);
  std::vector<std::byte> block(kBlockBytes, std::byte{0x3c});
  const std::vector<const void*> blocks(kKeys, block.data());
  KVTIER_ASSIGN_OR_RETURN(std::vector<Status> put, c.Put(ns.id, keys, blocks, kBlockBytes));
  for (const Status& s : put) KVTIER_RETURN_IF_ERROR(s);
  const int warmup = 20;
  const int reps = quick ? 100 : 1000;
  std::vector<double> samples;
  for (int r = 0; r < warmup + reps; ++r) {
    const double t0 = NowSeconds();
    KVTIER_ASSIGN_OR_RETURN(client::LookupResult res, c.Lookup(ns.id, keys));
    const double us = (NowSeconds() - t0) * 1e6;
    if (res.prefix != kKeys) {
      return Internal("KVT.LOOKUP found " + std::to_string(res.prefix) + " of 8192 keys");
    }
    if (r >= warmup) samples.push_back(us);
  }
  PrintFigure("lookup_rpc_8192_keys_us_p50", Median(samples), "us");
  (void)c.Drop(ns.id);
  return Status::Ok();
}

// Seconds per phase of one round of ShmPutGet.
struct ShmRound {
  double put = 0, memcpy_in = 0, get = 0, memcpy_out = 0;
};

// Buffers of one ShmPutGet run. The client's source and destination hold one call's blocks;
// the baseline buffer is as large as the working set the arena holds, so both sides copy to and
// from the same footprint. Every page is touched before timing.
struct ShmBuffers {
  std::vector<std::byte> src, dst, baseline;
  std::vector<const void*> src_ptrs;
  std::vector<void*> dst_ptrs;
};

ShmBuffers MakeShmBuffers(size_t blocks) {
  ShmBuffers b;
  b.src.resize(kShmBatch * kShmBlockBytes);
  for (size_t i = 0; i < b.src.size(); ++i) b.src[i] = static_cast<std::byte>(i * 131 + 7);
  b.dst.assign(kShmBatch * kShmBlockBytes, std::byte{0});
  b.baseline.assign(blocks * kShmBlockBytes, std::byte{0});
  for (size_t i = 0; i < kShmBatch; ++i) {
    b.src_ptrs.push_back(b.src.data() + i * kShmBlockBytes);
    b.dst_ptrs.push_back(b.dst.data() + i * kShmBlockBytes);
  }
  return b;
}

// One call's worth of blocks: put (or get) keys [first, first + n) through the daemon.
Status ShmPutBatch(client::Client& c, const NamespaceId& ns, std::span<const BlockKey> keys,
                   const ShmBuffers& b) {
  KVTIER_ASSIGN_OR_RETURN(
      std::vector<Status> put,
      c.Put(ns, keys, std::span(b.src_ptrs).first(keys.size()), kShmBlockBytes));
  for (const Status& s : put) KVTIER_RETURN_IF_ERROR(s);
  return Status::Ok();
}

Status ShmGetBatch(client::Client& c, const NamespaceId& ns, std::span<const BlockKey> keys,
                   ShmBuffers& b) {
  KVTIER_ASSIGN_OR_RETURN(
      size_t served, c.Get(ns, keys, std::span(b.dst_ptrs).first(keys.size()), kShmBlockBytes));
  if (served != keys.size())
    return Internal("shm Get served " + std::to_string(served) + " blocks");
  return Status::Ok();
}

// The baseline of the same batch: the same blocks copied into (out of) their own place in a
// buffer as large as the working set.
void MemcpyInBatch(ShmBuffers& b, size_t first, size_t n) {
  for (size_t i = first; i < first + n; ++i) {
    std::memcpy(b.baseline.data() + i * kShmBlockBytes, b.src_ptrs[i - first], kShmBlockBytes);
  }
  DoNotOptimize(b.baseline[(first + n) * kShmBlockBytes - 1]);
}

void MemcpyOutBatch(ShmBuffers& b, size_t first, size_t n) {
  for (size_t i = first; i < first + n; ++i) {
    std::memcpy(b.dst_ptrs[i - first], b.baseline.data() + i * kShmBlockBytes, kShmBlockBytes);
  }
  DoNotOptimize(b.dst[b.dst.size() - 1]);
}

// Runs `phase` and adds its duration to `*seconds`.
template <typename Phase>
Status Timed(double* seconds, Phase&& phase) {
  const double t0 = NowSeconds();
  Status s = phase();
  *seconds += NowSeconds() - t0;
  return s;
}

// Times `kvtier` and `baseline` back to back, in an order that alternates from call to call, so
// that both see the same memory bandwidth (it drifts on a shared machine) and neither always
// finds the caches as the other left them.
template <typename Kvtier, typename Baseline>
Status TimedPair(bool kvtier_first, double* kvtier_s, double* baseline_s, Kvtier&& kvtier,
                 Baseline&& baseline) {
  auto run_baseline = [&] {
    baseline();
    return Status::Ok();
  };
  if (!kvtier_first) KVTIER_RETURN_IF_ERROR(Timed(baseline_s, run_baseline));
  KVTIER_RETURN_IF_ERROR(Timed(kvtier_s, kvtier));
  if (kvtier_first) KVTIER_RETURN_IF_ERROR(Timed(baseline_s, run_baseline));
  return Status::Ok();
}

// One round: every batch is put and memcpy'd in as a pair, then every batch is fetched and
// memcpy'd out as a pair. Then (untimed) the last batch is read back and compared, and the blocks
// are deleted so the next round's puts find free slots.
Result<ShmRound> ShmOneRound(client::Client& c, const NamespaceId& ns, uint64_t round,
                             size_t blocks, ShmBuffers& b) {
  const std::vector<BlockKey> keys = MakeKeys(ns, round, blocks);
  ShmRound r;
  size_t pair = round;
  for (size_t i = 0; i < blocks; i += kShmBatch, ++pair) {
    const size_t n = std::min(kShmBatch, blocks - i);
    KVTIER_RETURN_IF_ERROR(TimedPair(
        pair % 2 == 1, &r.put, &r.memcpy_in,
        [&] { return ShmPutBatch(c, ns, std::span(keys).subspan(i, n), b); },
        [&] { MemcpyInBatch(b, i, n); }));
  }
  for (size_t i = 0; i < blocks; i += kShmBatch, ++pair) {
    const size_t n = std::min(kShmBatch, blocks - i);
    KVTIER_RETURN_IF_ERROR(TimedPair(
        pair % 2 == 1, &r.get, &r.memcpy_out,
        [&] { return ShmGetBatch(c, ns, std::span(keys).subspan(i, n), b); },
        [&] { MemcpyOutBatch(b, i, n); }));
  }
  // dst may hold baseline copies now; fetch the last batch again and compare it with the source.
  const size_t last = (blocks - 1) / kShmBatch * kShmBatch;
  KVTIER_RETURN_IF_ERROR(ShmGetBatch(c, ns, std::span(keys).subspan(last), b));
  if (std::memcmp(b.dst.data(), b.src.data(), (blocks - last) * kShmBlockBytes) != 0) {
    return Internal("shm Get returned bytes that differ from those put");
  }
  KVTIER_RETURN_IF_ERROR(c.Del(ns, keys).status());
  return r;
}

Status ShmPutGet(client::Client& c, bool quick) {
  KVTIER_ASSIGN_OR_RETURN(client::NamespaceInfo ns, Register(c, "shm", kShmBlockBytes));
  const size_t blocks = (quick ? 128 : 512) * kMiB / kShmBlockBytes;
  const int rounds = quick ? 4 : 10;
  ShmBuffers b = MakeShmBuffers(blocks);
  // Round 0 is a warm-up: it faults the arena's slots into this process's mapping.
  KVTIER_RETURN_IF_ERROR(ShmOneRound(c, ns.id, 0, blocks, b).status());
  KVTIER_ASSIGN_OR_RETURN(const uint64_t evicted_before, EvictedBlocks(c));
  std::vector<double> put, memcpy_in, get, memcpy_out;
  for (int r = 1; r <= rounds; ++r) {
    KVTIER_ASSIGN_OR_RETURN(ShmRound s, ShmOneRound(c, ns.id, r, blocks, b));
    put.push_back(s.put);
    memcpy_in.push_back(s.memcpy_in);
    get.push_back(s.get);
    memcpy_out.push_back(s.memcpy_out);
  }
  KVTIER_ASSIGN_OR_RETURN(const uint64_t evicted_after, EvictedBlocks(c));
  if (evicted_after != evicted_before) {
    std::fprintf(stderr,
                 "daemon_bench: the daemon evicted %llu blocks during the shm rounds; "
                 "its host tier is smaller than the working set\n",
                 static_cast<unsigned long long>(evicted_after - evicted_before));
  }
  const double bytes = static_cast<double>(blocks * kShmBlockBytes) / (1 << 30);
  PrintFigure("shm_put_ratio_to_memcpy", Median(memcpy_in) / Median(put), "ratio");
  PrintFigure("shm_get_ratio_to_memcpy", Median(memcpy_out) / Median(get), "ratio");
  PrintFigure("shm_put_gib_per_s", bytes / Median(put), "GiB/s");
  PrintFigure("shm_get_gib_per_s", bytes / Median(get), "GiB/s");
  PrintFigure("memcpy_put_gib_per_s", bytes / Median(memcpy_in), "GiB/s");
  PrintFigure("memcpy_get_gib_per_s", bytes / Median(memcpy_out), "GiB/s");
  (void)c.Drop(ns.id);
  return Status::Ok();
}

Status Run(const Flags& flags) {
  if (flags.daemon_pid != 0) KVTIER_RETURN_IF_ERROR(IdleClients(flags));
  KVTIER_ASSIGN_OR_RETURN(client::Client c, client::Client::Connect(flags.url));
  KVTIER_RETURN_IF_ERROR(c.Attach().status());
  KVTIER_RETURN_IF_ERROR(LookupRpc(c, flags.quick));
  return ShmPutGet(c, flags.quick);
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Flags flags;
  if (!kvtier::bench::ParseFlags(argc, argv, &flags)) return 2;
  const kvtier::Status s = kvtier::bench::Run(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "daemon_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

// Benchmarks of the in-process cache engine, each against a baseline measured in the same run:
//   hash_ratio_to_xxh3        chained block keys vs XXH3-128 chained over the same framed bytes
//   hash_ratio_to_xxh3_unchained  the same keys vs independent XXH3-128 of each block's tokens
//   payload_checksum_gib_per_s   the NVMe and remote tiers' block checksum (PayloadChecksum) on
//                             256 KiB blocks; payload_checksum_ratio_to_library: against the
//                             XXH3-64 of the libxxhash the daemon links (same bytes, same value)
//   lookup_8192_keys_us_p50   median time of one 8,192-key lookup, all keys present
//   host_put_ratio_to_memcpy  BeginPut + copy into the arena slot + CommitPut vs memcpy (2 MiB)
//   host_get_ratio_to_memcpy  Acquire + copy out of the arena slot + Release vs memcpy (2 MiB)
//   index_bytes_per_block     heap bytes the index spends per block (map entry + eviction links)
//   index_bytes_per_block_POLICY  the same for each eviction policy, at steady state: a full
//                             index that has evicted as many blocks as it holds, so that policies
//                             which remember evicted keys (arc, s3fifo) count that history too
//   timed_command_ns          what timing one command adds (metrics.histograms): two clock reads
//                             and a LatencyHistograms::Record, two threads recording at once
// A ratio above 1 means kvtier is faster than its baseline.
#include <malloc.h>
#include <xxhash.h>

#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/clock.h"
#include "common/latency_histogram.h"
#include "daemon/index/block_index.h"
#include "daemon/store/store.h"
#include "hashing/block_hasher.h"
#include "hashing/payload_checksum.h"
#include "tiers/host/host_tier.h"

namespace kvtier::bench {
namespace {

constexpr uint64_t kMiB = 1 << 20;

void HashRatio(bool quick) {
  constexpr size_t kTokens = 131072;
  constexpr uint32_t kBlockTokens = 16;
  std::vector<uint32_t> tokens(kTokens);
  std::mt19937 rng(7);
  for (uint32_t& t : tokens) t = rng() % 128256;
  std::vector<BlockKey> keys(kTokens / kBlockTokens);
  const NamespaceId ns{{1, 2}};
  const int reps = quick ? 20 : 200;
  // The framed bytes of every block, prepared once (the parent half is filled in as it goes).
  constexpr size_t kFramed = 16 + 1 + 4 + kBlockTokens * 4 + 1 + 4;
  std::vector<std::byte> framed(keys.size() * kFramed);
  for (size_t b = 0; b < keys.size(); ++b) {
    std::byte* buf = framed.data() + b * kFramed;
    buf[16] = std::byte{0x01};
    uint32_t count = kBlockTokens;
    std::memcpy(buf + 17, &count, 4);
    std::memcpy(buf + 21, tokens.data() + b * kBlockTokens, kBlockTokens * 4);
    buf[21 + kBlockTokens * 4] = std::byte{0x02};
    std::memset(buf + 22 + kBlockTokens * 4, 0, 4);
  }
  std::vector<double> chained, raw, independent;
  for (int r = 0; r < reps; ++r) {
    double t0 = NowSeconds();
    auto n = hashing::ChainKeysInto(ns, tokens, kBlockTokens, keys);
    double t1 = NowSeconds();
    DoNotOptimize(n.ok());
    DoNotOptimize(keys.back().low);
    // Baseline A: XXH3-128 over exactly the bytes the chain hashes (parent key, framed tokens,
    // framed empty extra: 90 bytes a block), each block's parent taken from the previous hash,
    // since that dependency is the definition of a chained key. Measures what kvtier adds on top
    // of the hash function.
    XXH128_hash_t prev{ns.low, ns.high};
    for (size_t b = 0; b < keys.size(); ++b) {
      std::byte* buf = framed.data() + b * kFramed;
      std::memcpy(buf, &prev, 16);
      prev = XXH3_128bits(buf, kFramed);
    }
    double t2 = NowSeconds();
    DoNotOptimize(prev.low64);
    // Baseline B: XXH3-128 of each block's 64 token bytes on their own, with no chaining and no
    // framing: the cost of hashing the tokens at all.
    uint64_t sink = 0;
    for (size_t b = 0; b < keys.size(); ++b) {
      sink ^= XXH3_128bits(tokens.data() + b * kBlockTokens, kBlockTokens * 4).low64;
    }
    double t3 = NowSeconds();
    DoNotOptimize(sink);
    chained.push_back(t1 - t0);
    raw.push_back(t2 - t1);
    independent.push_back(t3 - t2);
  }
  PrintFigure("hash_ratio_to_xxh3", Median(raw) / Median(chained), "ratio");
  PrintFigure("hash_ratio_to_xxh3_unchained", Median(independent) / Median(chained), "ratio");
  PrintFigure("hash_chain_131072_tokens_us", Median(chained) * 1e6, "us");
}

// The checksum the mover computes for every block it writes to NVMe and verifies for every block
// it reads back: on 256 KiB blocks over a 64 MiB buffer, larger than the caches, as the blocks
// it moves are.
void PayloadChecksumRate(bool quick) {
  constexpr size_t kBlock = 256 << 10;
  constexpr size_t kBuffer = 64 * kMiB;
  std::vector<std::byte> data(kBuffer);
  std::mt19937_64 rng(5);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t word = rng();
    std::memcpy(data.data() + i, &word, 8);
  }
  std::vector<double> ours, library;
  uint64_t sink = 0;
  const int reps = quick ? 5 : 30;
  for (int r = 0; r < reps; ++r) {
    double t0 = NowSeconds();
    for (size_t at = 0; at < kBuffer; at += kBlock) {
      sink ^= hashing::PayloadChecksum({data.data() + at, kBlock});
    }
    double t1 = NowSeconds();
    for (size_t at = 0; at < kBuffer; at += kBlock) sink ^= XXH3_64bits(data.data() + at, kBlock);
    double t2 = NowSeconds();
    ours.push_back(t1 - t0);
    library.push_back(t2 - t1);
  }
  DoNotOptimize(sink);
  PrintFigure("payload_checksum_gib_per_s", kBuffer / Median(ours) / (1 << 30), "GiB/s");
  PrintFigure("payload_checksum_ratio_to_library", Median(library) / Median(ours), "ratio");
}

void LookupLatency(bool quick) {
  auto index = index::BlockIndex::Create({}).value();
  constexpr size_t kKeys = 8192;
  std::vector<BlockKey> keys(kKeys);
  std::mt19937_64 rng(11);
  for (BlockKey& k : keys) {
    k = BlockKey{{rng(), rng()}};
    index::BlockMeta meta;
    meta.extent = {0, 4096};
    (void)index->InsertReady(k, meta);
  }
  std::vector<double> samples;
  const int reps = quick ? 50 : 500;
  for (int r = 0; r < reps; ++r) {
    double t0 = NowSeconds();
    index::LookupResult res = index->Lookup(keys, /*touch=*/true);
    samples.push_back((NowSeconds() - t0) * 1e6);
    DoNotOptimize(res.ready_prefix);
  }
  PrintFigure("lookup_8192_keys_us_p50", Median(samples), "us");
}

void HostPutGet(bool quick) {
  constexpr uint64_t kBlock = 2 * kMiB;
  const uint64_t arena = quick ? 128 * kMiB : 512 * kMiB;
  const uint64_t blocks = arena / kBlock;
  auto tier = tiers::HostTier::Create({.capacity_bytes = arena, .try_mlock = false}).value();
  auto store = store::Store::Create({}, {tier.get()}, SteadyClock::Instance()).value();
  const NamespaceId ns{{3, 4}};
  (void)store->RegisterNamespace({ns, 16, kBlock, "bench"});
  std::vector<std::byte> src(kBlock, std::byte{0x5a});
  std::vector<std::byte> dst(kBlock);
  std::vector<std::byte> baseline_arena(arena);
  std::memset(baseline_arena.data(), 0, arena);  // fault the baseline's pages in, as the arena's
  const int rounds = quick ? 2 : 6;
  uint64_t next_key = 0;
  // Warm-up: fill the arena once so its pages are faulted in and puts run at steady state
  // (every further put evicts the oldest block).
  for (uint64_t i = 0; i < blocks; ++i) (void)store->Put(ns, BlockKey{{9, next_key++}}, src);

  std::vector<double> put_s, memcpy_in_s, get_s, memcpy_out_s;
  for (int r = 0; r < rounds; ++r) {
    double t0 = NowSeconds();
    for (uint64_t i = 0; i < blocks; ++i) {
      auto res = store->BeginPut(ns, BlockKey{{9, next_key++}}, kBlock);
      std::memcpy(res->address, src.data(), kBlock);
      (void)store->CommitPut(res->id);
    }
    double t1 = NowSeconds();
    for (uint64_t i = 0; i < blocks; ++i) {
      std::memcpy(baseline_arena.data() + i * kBlock, src.data(), kBlock);
    }
    double t2 = NowSeconds();
    for (uint64_t i = 0; i < blocks; ++i) {
      auto lease = store->Acquire(ns, BlockKey{{9, next_key - blocks + i}});
      std::memcpy(dst.data(), lease->address, kBlock);
      (void)store->Release(lease->id);
    }
    double t3 = NowSeconds();
    for (uint64_t i = 0; i < blocks; ++i) {
      std::memcpy(dst.data(), baseline_arena.data() + i * kBlock, kBlock);
    }
    double t4 = NowSeconds();
    DoNotOptimize(dst[kBlock - 1]);
    put_s.push_back(t1 - t0);
    memcpy_in_s.push_back(t2 - t1);
    get_s.push_back(t3 - t2);
    memcpy_out_s.push_back(t4 - t3);
  }
  PrintFigure("host_put_ratio_to_memcpy", Median(memcpy_in_s) / Median(put_s), "ratio");
  PrintFigure("host_get_ratio_to_memcpy", Median(memcpy_out_s) / Median(get_s), "ratio");
  PrintFigure("host_put_gib_per_s",
              static_cast<double>(blocks * kBlock) / Median(put_s) / (1 << 30), "GiB/s");
}

// Heap bytes in use, mmapped chunks included: glibc serves large allocations (a policy's arrays,
// a map's bucket array) with mmap below a threshold that moves at run time, and uordblks alone
// would count such an array or not depending on what was freed before.
size_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

void IndexBytesPerBlock(bool quick) {
  const size_t blocks = quick ? 200'000 : 1'000'000;
  size_t before = HeapBytesInUse();
  {
    auto index = index::BlockIndex::Create({}).value();
    std::mt19937_64 rng(5);
    index::BlockMeta meta;
    meta.extent = {0, 2 * kMiB};
    for (size_t i = 0; i < blocks; ++i) (void)index->InsertReady(BlockKey{{rng(), rng()}}, meta);
    PrintFigure("index_bytes_per_block", static_cast<double>(HeapBytesInUse() - before) / blocks,
                "bytes");
  }
  for (const std::string& policy : index::EvictionPolicyNames()) {
    before = HeapBytesInUse();
    auto index = index::BlockIndex::Create({.policy = policy, .capacity_hint_blocks = blocks});
    std::mt19937_64 rng(5);
    index::BlockMeta meta;
    meta.extent = {0, 2 * kMiB};
    for (size_t i = 0; i < 2 * blocks; ++i) {
      (void)(*index)->InsertReady(BlockKey{{rng(), rng()}}, meta);
      if ((*index)->TrackedBlocks(TierId::kHost) > blocks) {
        auto victim = (*index)->PickVictim(TierId::kHost, 0);
        if (victim) (void)(*index)->Erase(victim->first);
      }
    }
    PrintFigure("index_bytes_per_block_" + policy,
                static_cast<double>(HeapBytesInUse() - before) / blocks, "bytes");
  }
}

// Two threads, as two network threads would, each timing `ops` empty commands into the same
// histograms (60 series, as the server's): the figure is the time per command of the slower one.
void TimedCommandCost(bool quick) {
  const int ops = quick ? 200'000 : 2'000'000;
  LatencyHistograms histograms(60);
  std::vector<double> samples;
  for (int rep = 0; rep < (quick ? 3 : 9); ++rep) {
    double worst = 0;
    std::vector<std::thread> threads;
    std::vector<double> per_thread(2);
    for (size_t t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        const double t0 = NowSeconds();
        for (int i = 0; i < ops; ++i) {
          const auto started = std::chrono::steady_clock::now();
          histograms.Record(static_cast<size_t>(i) % 60,
                            std::chrono::steady_clock::now() - started);
        }
        per_thread[t] = (NowSeconds() - t0) / ops * 1e9;
      });
    }
    for (std::thread& t : threads) t.join();
    for (double ns : per_thread) worst = std::max(worst, ns);
    samples.push_back(worst);
  }
  PrintFigure("timed_command_ns", Median(samples), "ns");
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  const bool quick = kvtier::bench::QuickMode(argc, argv);
  kvtier::bench::HashRatio(quick);
  kvtier::bench::PayloadChecksumRate(quick);
  kvtier::bench::LookupLatency(quick);
  kvtier::bench::HostPutGet(quick);
  kvtier::bench::IndexBytesPerBlock(quick);
  kvtier::bench::TimedCommandCost(quick);
  return 0;
}

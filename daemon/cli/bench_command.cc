#include "daemon/cli/bench_command.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "common/json_text.h"
#include "common/units.h"
#include "daemon/cli/block_bytes_flag.h"
#include "daemon/cli/latency.h"
#include "hashing/block_hasher.h"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

// What a run holds in memory: 16 bytes of key per block it puts (--concurrency x --count), and
// per thread a buffer of --batch blocks, filled before the first call. Bounded so that a typo in
// a flag is a message instead of bad_alloc: 2^27 blocks is 2 GiB of keys, and 16 GiB of buffers
// is what a client of a daemon can spare on a large host.
constexpr uint64_t kMaxBenchBlocks = uint64_t{1} << 27;
constexpr uint64_t kMaxBenchBufferBytes = uint64_t{16} << 30;

struct PhaseResult {
  uint64_t blocks_ok = 0;
  uint64_t blocks_failed = 0;
  LatencyRecorder latency;
  Status error;  // the first call that failed outright
};

struct Worker {
  client::Client client;
  std::vector<BlockKey> keys;
  std::vector<std::byte> buffer;  // batch x block_bytes
  PhaseResult put;
  PhaseResult get;
};

struct Phase {
  PhaseResult total;
  double wall_s = 0;
};

// The bench namespace: `salt` names it (so that runs against two daemons address the same blocks),
// or a random salt does (so that a run never collides with an earlier one).
hashing::NamespaceDescriptor BenchDescriptor(const std::string& salt) {
  hashing::NamespaceDescriptor d;
  d.model_id = "kvtier-bench";
  d.kv_dtype = "int8";
  d.num_layers = d.num_kv_heads = d.head_dim = 1;
  d.tokens_per_block = 16;
  d.layout_tag = "bench";
  if (!salt.empty()) {
    d.tenant_salt = salt;
    return d;
  }
  char random_salt[32];
  std::snprintf(
      random_salt, sizeof(random_salt), "%016llx",
      static_cast<unsigned long long>(std::random_device{}()) << 32 ^ std::random_device{}());
  d.tenant_salt = random_salt;
  return d;
}

// One call: put or get blocks [start, start + n) of the worker's keys.
void BenchCall(Worker& w, const NamespaceId& ns, size_t block_bytes, bool shm, bool put,
               size_t start, size_t n) {
  std::vector<void*> ptrs(n);
  for (size_t i = 0; i < n; ++i) ptrs[i] = w.buffer.data() + i * block_bytes;
  const std::span<const BlockKey> keys = std::span(w.keys).subspan(start, n);
  PhaseResult& r = put ? w.put : w.get;
  const auto t0 = Clock::now();
  if (put) {
    std::vector<const void*> src(ptrs.begin(), ptrs.end());
    std::vector<std::span<const std::byte>> spans;
    for (void* p : ptrs) spans.emplace_back(static_cast<const std::byte*>(p), block_bytes);
    Result<std::vector<Status>> s =
        shm ? w.client.Put(ns, keys, src, block_bytes) : w.client.PutInline(ns, keys, spans);
    r.latency.Add(Clock::now() - t0);
    if (!s.ok()) {
      r.error = s.status();
      return;
    }
    for (const Status& st : *s) {
      (st.ok() || st.code() == StatusCode::kAlreadyExists) ? ++r.blocks_ok : ++r.blocks_failed;
    }
  } else {
    std::vector<std::span<std::byte>> spans;
    for (void* p : ptrs) spans.emplace_back(static_cast<std::byte*>(p), block_bytes);
    Result<size_t> served =
        shm ? w.client.Get(ns, keys, ptrs, block_bytes) : w.client.GetInline(ns, keys, spans);
    r.latency.Add(Clock::now() - t0);
    if (!served.ok()) {
      r.error = served.status();
      return;
    }
    r.blocks_ok += *served;
    r.blocks_failed += n - *served;
  }
}

Phase RunPhase(std::vector<Worker>& workers, const BenchFlags& flags, const NamespaceId& ns,
               size_t block_bytes, bool put) {
  const bool shm = flags.path == "shm";
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t t = 0; t < workers.size(); ++t) {
    threads.emplace_back([&, t] {
      const std::string name = "kvtier-bench-" + std::to_string(t);
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      Worker& w = workers[t];
      for (size_t i = 0; i < flags.count && (put ? w.put : w.get).error.ok(); i += flags.batch) {
        BenchCall(w, ns, block_bytes, shm, put, i, std::min(flags.batch, flags.count - i));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  Phase phase;
  phase.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (Worker& w : workers) {
    const PhaseResult& r = put ? w.put : w.get;
    phase.total.blocks_ok += r.blocks_ok;
    phase.total.blocks_failed += r.blocks_failed;
    phase.total.latency.Merge(r.latency);
    if (phase.total.error.ok()) phase.total.error = r.error;
  }
  return phase;
}

nlohmann::ordered_json PhaseJson(const Phase& p, size_t block_bytes) {
  const LatencyRecorder::Summary s = p.total.latency.Summarize();
  const double bytes = static_cast<double>(p.total.blocks_ok) * static_cast<double>(block_bytes);
  nlohmann::ordered_json j;
  j["blocks_ok"] = p.total.blocks_ok;
  j["blocks_failed"] = p.total.blocks_failed;
  j["wall_s"] = p.wall_s;
  j["gib_per_s"] = p.wall_s > 0 ? bytes / p.wall_s / double(1 << 30) : 0.0;
  j["blocks_per_s"] = p.wall_s > 0 ? static_cast<double>(p.total.blocks_ok) / p.wall_s : 0.0;
  j["calls"] = s.count;
  j["latency_us"] = {{"mean", s.mean_us}, {"p50", s.p50_us}, {"p99", s.p99_us}, {"max", s.max_us}};
  return j;
}

void PrintTable(const BenchFlags& flags, size_t block_bytes, const Phase& put, const Phase& get,
                std::ostream& out) {
  out << "bench: " << flags.concurrency << " client(s) x " << flags.count << " blocks of "
      << FormatBytes(block_bytes) << ", path " << flags.path << ", batch " << flags.batch << ", "
      << flags.client.url << "\n";
  char line[200];
  std::snprintf(line, sizeof(line), "%-4s %10s %8s %9s %11s %10s %10s %10s\n", "op", "blocks",
                "failed", "GiB/s", "blocks/s", "p50 us", "p99 us", "max us");
  out << line;
  for (const auto& [name, phase] : {std::pair{"put", &put}, std::pair{"get", &get}}) {
    if (!flags.only.empty() && flags.only != name) continue;
    const nlohmann::ordered_json j = PhaseJson(*phase, block_bytes);
    const LatencyRecorder::Summary s = phase->total.latency.Summarize();
    std::snprintf(line, sizeof(line), "%-4s %10llu %8llu %9.2f %11.0f %10.1f %10.1f %10.1f\n", name,
                  static_cast<unsigned long long>(phase->total.blocks_ok),
                  static_cast<unsigned long long>(phase->total.blocks_failed),
                  j["gib_per_s"].get<double>(), j["blocks_per_s"].get<double>(), s.p50_us, s.p99_us,
                  s.max_us);
    out << line;
  }
}

// The block size, once the flags are known to fit kMaxBenchBlocks and kMaxBenchBufferBytes;
// kInvalidArgument naming the flag otherwise. The products are checked: the flags are any 64-bit
// number when a test or a script fills BenchFlags.
Result<uint64_t> ValidateBenchFlags(const BenchFlags& flags) {
  KVTIER_ASSIGN_OR_RETURN(const uint64_t block_bytes, ParseBlockBytes(flags.block_bytes));
  // A get-only run reads blocks an earlier run put: under a random salt it would read a fresh
  // namespace, miss every block and report figures of nothing.
  if (flags.only == "get" && flags.salt.empty()) {
    return InvalidArgument("--only get reads the blocks of an earlier run: give its --salt");
  }
  if (flags.concurrency == 0 || flags.count == 0 || flags.batch == 0) {
    return InvalidArgument("--concurrency, --count and --batch must be at least 1");
  }
  const std::string shape = "--concurrency " + std::to_string(flags.concurrency) + " x --count " +
                            std::to_string(flags.count);
  uint64_t blocks = 0;
  if (__builtin_mul_overflow(uint64_t{flags.concurrency}, uint64_t{flags.count}, &blocks) ||
      blocks > kMaxBenchBlocks) {
    return InvalidArgument(shape + " blocks is more than a run may put (" +
                           std::to_string(kMaxBenchBlocks) + ")");
  }
  const uint64_t buffered_blocks = uint64_t{flags.concurrency} * std::min(flags.batch, flags.count);
  uint64_t buffer_bytes = 0;
  if (__builtin_mul_overflow(buffered_blocks, block_bytes, &buffer_bytes) ||
      buffer_bytes > kMaxBenchBufferBytes) {
    return InvalidArgument("--concurrency x --batch x --block-bytes is more than the " +
                           FormatBytes(kMaxBenchBufferBytes) + " of buffers a run may hold");
  }
  return block_bytes;
}

// Connects every worker, registers the namespace and prepares keys and buffers. Every connection
// comes first, so that a daemon refusing one leaves no namespace registered behind.
Status Prepare(const BenchFlags& flags, size_t block_bytes, std::vector<Worker>& workers,
               client::NamespaceInfo* ns) {
  for (size_t t = 0; t < flags.concurrency; ++t) {
    KVTIER_ASSIGN_OR_RETURN(client::Client c, ConnectWithFlags(flags.client));
    if (flags.path == "shm") KVTIER_RETURN_IF_ERROR(c.Attach().status());
    workers.push_back(Worker{std::move(c), {}, {}, {}, {}});
  }
  KVTIER_ASSIGN_OR_RETURN(
      *ns, workers.front().client.RegisterNamespace(BenchDescriptor(flags.salt), block_bytes));
  for (size_t t = 0; t < workers.size(); ++t) {
    Worker& w = workers[t];
    w.keys.reserve(flags.count);
    for (uint64_t i = 0; i < flags.count; ++i) {
      const uint64_t id[2] = {t, i};
      w.keys.push_back(hashing::FoldForeignKey(
          ns->id, std::span(reinterpret_cast<const std::byte*>(id), sizeof(id))));
    }
    w.buffer.resize(std::min(flags.batch, flags.count) * block_bytes);
    for (size_t i = 0; i < w.buffer.size(); ++i) w.buffer[i] = static_cast<std::byte>(i * 131 + t);
  }
  return Status::Ok();
}

// Untimed rounds of the measured calls, their blocks deleted after each so that the measured puts
// copy again.
Status WarmUp(std::vector<Worker>& workers, const BenchFlags& flags, const NamespaceId& ns,
              size_t block_bytes) {
  for (size_t round = 0; round < flags.warmup; ++round) {
    for (bool put : {true, false}) {
      const Phase phase = RunPhase(workers, flags, ns, block_bytes, put);
      KVTIER_RETURN_IF_ERROR(phase.total.error);
    }
    for (Worker& w : workers) {
      KVTIER_RETURN_IF_ERROR(w.client.Del(ns, w.keys).status());
      w.put = PhaseResult{};
      w.get = PhaseResult{};
    }
  }
  return Status::Ok();
}

}  // namespace

int RunBench(const BenchFlags& flags, std::ostream& out, std::ostream& err) {
  Result<uint64_t> block_bytes = ValidateBenchFlags(flags);
  if (!block_bytes.ok()) {
    err << "kvtier bench: " << block_bytes.status().message() << "\n";
    return 1;
  }
  std::vector<Worker> workers;
  client::NamespaceInfo ns;
  if (Status s = Prepare(flags, *block_bytes, workers, &ns); !s.ok()) {
    err << "kvtier bench: " << s.ToString() << "\n";
    return 1;
  }
  const bool run_put = flags.only != "get";
  const bool run_get = flags.only != "put";
  // Warm-up rounds put, get and delete: only a run of both phases has blocks of its own to do so.
  if (Status s = run_put && run_get ? WarmUp(workers, flags, ns.id, *block_bytes) : Status::Ok();
      !s.ok()) {
    err << "kvtier bench: warm-up: " << s.ToString() << "\n";
    return 1;
  }
  const Phase put = run_put ? RunPhase(workers, flags, ns.id, *block_bytes, /*put=*/true) : Phase{};
  const Phase get = run_get && put.total.error.ok()
                        ? RunPhase(workers, flags, ns.id, *block_bytes, /*put=*/false)
                        : Phase{};
  // A get-only run read blocks another run put and kept: they are not its to drop.
  if (run_put && !flags.keep && workers.front().client.usable()) {
    (void)workers.front().client.Drop(ns.id);
  }
  for (const Status& s : {put.total.error, get.total.error}) {
    if (!s.ok()) {
      err << "kvtier bench: " << s.ToString() << "\n";
      return 1;
    }
  }
  if (flags.json) {
    nlohmann::ordered_json j;
    j["url"] = flags.client.url;
    j["path"] = flags.path;
    j["block_bytes"] = *block_bytes;
    j["concurrency"] = flags.concurrency;
    j["count"] = flags.count;
    j["batch"] = flags.batch;
    if (run_put) j["put"] = PhaseJson(put, *block_bytes);
    if (run_get) j["get"] = PhaseJson(get, *block_bytes);
    out << JsonText(j) << "\n";
  } else {
    PrintTable(flags, *block_bytes, put, get, out);
  }
  return 0;
}

Command AddBenchCommand(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand("bench", "Measure put/get throughput and latency");
  AddClientFlags(sub, &flags->client);
  sub->add_option("--block-bytes", flags->block_bytes,
                  "Block size (4096, 2MiB, ...; at most 1GiB, above any engine's KV block)")
      ->check(BlockBytesValidator())
      ->capture_default_str();
  sub->add_option("--concurrency", flags->concurrency, "Threads, one client each")
      ->check(CLI::Range(size_t{1}, size_t{1024}))
      ->capture_default_str();
  sub->add_option("--path", flags->path, "shm (shared memory, Unix socket) or inline")
      ->check(CLI::IsMember({"shm", "inline"}))
      ->capture_default_str();
  sub->add_option("--count", flags->count, "Blocks per thread")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--batch", flags->batch, "Blocks per call")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--warmup", flags->warmup, "Untimed put/get/delete rounds before measuring")
      ->check(CLI::Range(size_t{0}, size_t{100}))
      ->capture_default_str();
  sub->add_option(
      "--salt", flags->salt,
      "Tenant salt of the bench namespace: the same salt, the same blocks on any daemon "
      "(default: random)");
  sub->add_option("--only", flags->only,
                  "Run one phase: put, or get (of blocks an earlier run put and kept; needs its "
                  "--salt, and never drops them)")
      ->check(CLI::IsMember({"put", "get"}));
  sub->add_flag("--json", flags->json, "Print one JSON object instead of a table");
  sub->add_flag("--keep", flags->keep, "Keep the blocks (do not drop the bench namespace)");
  sub->callback([flags] {});
  return Command{sub, [flags] { return RunBench(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli

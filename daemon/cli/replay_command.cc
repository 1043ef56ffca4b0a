#include "daemon/cli/replay_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/json_text.h"
#include "common/units.h"
#include "daemon/cli/block_bytes_flag.h"
#include "daemon/cli/replayer.h"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Rates {
  double wall_s = 0;
  double requests_per_s = 0;
  double get_gib_per_s = 0;
  double put_gib_per_s = 0;
};

Rates ComputeRates(const ReplayTotals& t, uint64_t block_bytes, double wall_s) {
  Rates r;
  r.wall_s = wall_s;
  if (wall_s <= 0) return r;
  const double gib = static_cast<double>(block_bytes) / double(1 << 30);
  r.requests_per_s = static_cast<double>(t.requests) / wall_s;
  r.get_gib_per_s = static_cast<double>(t.served_blocks) * gib / wall_s;
  r.put_gib_per_s = static_cast<double>(t.stored_blocks) * gib / wall_s;
  return r;
}

double Ratio(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

nlohmann::ordered_json LatencyJson(const LatencyRecorder& l) {
  const LatencyRecorder::Summary s = l.Summarize();
  return {{"count", s.count},
          {"mean", s.mean_us},
          {"p50", s.p50_us},
          {"p99", s.p99_us},
          {"max", s.max_us}};
}

void PrintJson(const ReplayFlags& flags, uint64_t block_bytes, const ReplayTotals& t,
               const Rates& r, std::ostream& out) {
  nlohmann::ordered_json j;
  j["trace"] = flags.trace_path;
  j["url"] = flags.client.url;
  j["path"] = flags.path;
  j["block_bytes"] = block_bytes;
  j["refresh"] = !flags.no_refresh;
  j["hold_ms"] = flags.hold_ms;
  j["requests"] = t.requests;
  j["blocks"] = t.blocks;
  j["served_blocks"] = t.served_blocks;
  j["block_hit_ratio"] = t.block_hit_ratio();
  j["hit_ratio_by_tier"] = {{"gpu", Ratio(t.served_by_tier[0], t.blocks)},
                            {"host", Ratio(t.served_by_tier[1], t.blocks)},
                            {"nvme", Ratio(t.served_by_tier[2], t.blocks)},
                            {"remote", Ratio(t.served_by_tier[3], t.blocks)}};
  j["lookup_hit_blocks"] = t.lookup_hit_blocks;
  j["lost_blocks"] = t.lost_blocks;
  j["corrupt_blocks"] = t.corrupt_blocks;
  j["input_tokens"] = t.input_tokens;
  j["hit_tokens"] = t.hit_tokens;
  j["token_hit_ratio"] = Ratio(t.hit_tokens, t.input_tokens);
  j["stored_blocks"] = t.stored_blocks;
  j["existing_blocks"] = t.existing_blocks;
  j["failed_puts"] = t.failed_puts;
  j["wall_s"] = r.wall_s;
  j["requests_per_s"] = r.requests_per_s;
  j["get_gib_per_s"] = r.get_gib_per_s;
  j["put_gib_per_s"] = r.put_gib_per_s;
  j["latency_us"] = {{"request", LatencyJson(t.request_latency)},
                     {"lookup", LatencyJson(t.lookup_latency)},
                     {"get", LatencyJson(t.get_latency)},
                     {"put", LatencyJson(t.put_latency)}};
  out << JsonText(j) << "\n";
}

void PrintTable(const ReplayFlags& flags, uint64_t block_bytes, const ReplayTotals& t,
                const Rates& r, std::ostream& out) {
  char line[256];
  out << "replay: " << flags.trace_path << ", " << t.requests << " requests, blocks of "
      << FormatBytes(block_bytes) << ", path " << flags.path << ", " << flags.client.url << "\n";
  std::snprintf(
      line, sizeof(line),
      "blocks        %12llu   hit %12llu (%6.2f%%)   gpu %.2f%%  host %.2f%%  nvme %.2f%%  "
      "remote %.2f%%\n",
      static_cast<unsigned long long>(t.blocks), static_cast<unsigned long long>(t.served_blocks),
      100 * t.block_hit_ratio(), 100 * Ratio(t.served_by_tier[0], t.blocks),
      100 * Ratio(t.served_by_tier[1], t.blocks), 100 * Ratio(t.served_by_tier[2], t.blocks),
      100 * Ratio(t.served_by_tier[3], t.blocks));
  out << line;
  std::snprintf(line, sizeof(line), "input tokens  %12llu   hit %12llu (%6.2f%%)\n",
                static_cast<unsigned long long>(t.input_tokens),
                static_cast<unsigned long long>(t.hit_tokens),
                100 * Ratio(t.hit_tokens, t.input_tokens));
  out << line;
  out << "lost after lookup " << t.lost_blocks << ", corrupt " << t.corrupt_blocks << "\n";
  out << "puts          " << t.stored_blocks << " stored, " << t.existing_blocks
      << " already there, " << t.failed_puts << " refused\n";
  std::snprintf(line, sizeof(line),
                "throughput    %.1f requests/s, get %.2f GiB/s, put %.2f GiB/s over %.1f s\n",
                r.requests_per_s, r.get_gib_per_s, r.put_gib_per_s, r.wall_s);
  out << line;
  out << "latency (us)          p50          p99          max\n";
  for (const auto& [name, l] :
       {std::pair{"request", &t.request_latency}, std::pair{"lookup", &t.lookup_latency},
        std::pair{"get", &t.get_latency}, std::pair{"put", &t.put_latency}}) {
    const LatencyRecorder::Summary s = l->Summarize();
    std::snprintf(line, sizeof(line), "  %-10s %12.1f %12.1f %12.1f\n", name, s.p50_us, s.p99_us,
                  s.max_us);
    out << line;
  }
}

hashing::NamespaceDescriptor ReplayDescriptor(const ReplayFlags& flags) {
  std::string salt = flags.salt;
  if (salt.empty()) {
    std::random_device rd;
    salt = std::to_string(rd()) + "-" + std::to_string(rd());
  }
  return TraceNamespace(flags.block_tokens, salt);
}

// 0, or a finite speed no slower than kMinReplaySpeed; an error message otherwise.
std::string SpeedProblem(double speed) {
  // Written so that NaN fails too.
  if (speed == 0 || (std::isfinite(speed) && speed >= kMinReplaySpeed)) return "";
  char message[96];
  std::snprintf(message, sizeof(message), "%g is not 0 or a speed of at least %g", speed,
                kMinReplaySpeed);
  return message;
}

}  // namespace

std::chrono::microseconds ReplayOffset(uint64_t timestamp_ms, uint64_t first_ms, double speed) {
  // In double, clamped before the conversion: a gap of hours at a slow speed is more microseconds
  // than int64 holds, and converting such a double is undefined (in practice a time in the past,
  // which silently stopped the pacing).
  const double offset_us =
      (static_cast<double>(timestamp_ms) - static_cast<double>(first_ms)) / speed * 1000.0;
  const double max_us = static_cast<double>(kMaxReplayOffset.count());
  return std::chrono::microseconds(static_cast<int64_t>(std::clamp(offset_us, 0.0, max_us)));
}

int RunReplay(const ReplayFlags& flags, std::ostream& out, std::ostream& err) {
  Result<uint64_t> block_bytes = ParseBlockBytes(flags.block_bytes);
  if (!block_bytes.ok()) {
    err << "kvtier replay: " << block_bytes.status().message() << "\n";
    return 1;
  }
  if (const std::string problem = SpeedProblem(flags.speed); !problem.empty()) {
    err << "kvtier replay: --speed: " << problem << "\n";
    return 1;
  }
  Result<std::vector<TraceRequest>> trace = ReadTrace(flags.trace_path, flags.limit);
  if (!trace.ok()) {
    err << "kvtier replay: " << trace.status().message() << "\n";
    return 1;
  }
  Result<client::Client> client = ConnectWithFlags(flags.client);
  Status status = client.status();
  if (status.ok() && flags.path == "shm") status = client->Attach().status();
  client::NamespaceInfo ns;
  if (status.ok()) {
    Result<client::NamespaceInfo> registered =
        client->RegisterNamespace(ReplayDescriptor(flags), *block_bytes);
    status = registered.status();
    if (registered.ok()) ns = *registered;
  }
  if (!status.ok()) {
    err << "kvtier replay: " << status.ToString() << "\n";
    return 1;
  }

  Replayer replayer(&*client, ns.id,
                    ReplayOptions{*block_bytes, flags.path == "shm", flags.block_tokens,
                                  !flags.no_refresh, std::chrono::milliseconds(flags.hold_ms)});
  const auto start = Clock::now();
  auto last_progress = start;
  for (const TraceRequest& request : *trace) {
    if (flags.speed > 0) {
      std::this_thread::sleep_until(
          start + ReplayOffset(request.timestamp_ms, trace->front().timestamp_ms, flags.speed));
    }
    if (Status s = replayer.Replay(request); !s.ok()) {
      err << "kvtier replay: request " << replayer.totals().requests + 1 << ": " << s.ToString()
          << "\n";
      return 1;
    }
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_progress).count() >= flags.progress_interval_s) {
      last_progress = now;
      const ReplayTotals& t = replayer.totals();
      char line[160];
      std::snprintf(line, sizeof(line), "replay: %llu/%zu requests, block hit %.1f%%, %.0f req/s\n",
                    static_cast<unsigned long long>(t.requests), trace->size(),
                    100 * t.block_hit_ratio(),
                    t.requests / std::chrono::duration<double>(now - start).count());
      err << line << std::flush;
    }
  }
  const ReplayTotals& totals = replayer.totals();
  const Rates rates = ComputeRates(totals, *block_bytes,
                                   std::chrono::duration<double>(Clock::now() - start).count());
  if (flags.json) {
    PrintJson(flags, *block_bytes, totals, rates, out);
  } else {
    PrintTable(flags, *block_bytes, totals, rates, out);
  }
  if (totals.corrupt_blocks > 0) {
    err << "kvtier replay: " << totals.corrupt_blocks << " block(s) came back with wrong bytes\n";
    return 1;
  }
  return 0;
}

Command AddReplayCommand(CLI::App& app) {
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* sub = app.add_subcommand(
      "replay", "Drive a running daemon with a Mooncake-format trace and verify every block");
  AddClientFlags(sub, &flags->client);
  sub->add_option("trace", flags->trace_path, "Trace file, one JSON request per line")->required();
  sub->add_option("--block-bytes", flags->block_bytes,
                  "Payload bytes per trace block (1MiB, ...; at most 1GiB, above any engine's KV "
                  "block)")
      ->required()
      ->check(BlockBytesValidator());
  sub->add_option("--limit", flags->limit, "Replay only the first N requests (0: all)");
  sub->add_option("--path", flags->path, "shm (shared memory, Unix socket) or inline")
      ->check(CLI::IsMember({"shm", "inline"}))
      ->capture_default_str();
  sub->add_option("--block-tokens", flags->block_tokens, "Tokens per trace block")
      ->check(CLI::Range(uint64_t{1}, uint64_t{65536}))
      ->capture_default_str();
  sub->add_option("--salt", flags->salt, "Tenant salt of the replay namespace (default: random)");
  sub->add_option("--speed", flags->speed,
                  "Send each request at its trace timestamp divided by this (0: as fast as "
                  "possible; else at least 1e-6)")
      ->check(CLI::Validator(
          [](std::string& text) {
            double speed = 0;
            return CLI::detail::lexical_cast(text, speed) ? SpeedProblem(speed)
                                                          : "'" + text + "' is not a number";
          },
          "SPEED"))
      ->capture_default_str();
  sub->add_flag("--no-refresh", flags->no_refresh,
                "Do not send KVT.REFRESH after a request's puts (as a client that leaves its new "
                "blocks more recent than their prefix; docs/simulate.md)");
  sub->add_option("--hold-ms", flags->hold_ms,
                  "Each lookup holds the prefix it found from eviction this long (KVT.LOOKUP ... "
                  "HOLD), as the vLLM connector does until it has loaded it (0: no hold; a block "
                  "evicted between the lookup and the get counts as lost)")
      ->check(CLI::Range(uint64_t{0}, static_cast<uint64_t>(client::kMaxLookupHold.count())))
      ->capture_default_str();
  sub->add_flag("--json", flags->json, "Print one JSON object instead of a table");
  sub->callback([flags] {});
  return Command{sub, [flags] { return RunReplay(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli

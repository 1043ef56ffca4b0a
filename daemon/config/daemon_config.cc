#include "daemon/config/daemon_config.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "common/listen_host.h"
#include "common/paths.h"
#include "common/units.h"
#include "daemon/config/quota_config.h"
#include "daemon/index/eviction_policy.h"
#include "daemon/placement/admission_policy.h"
#include "daemon/placement/gpu_promotion_policy.h"

namespace kvtier::config {
namespace {

// One setter per accepted YAML key ("section.key"); each parses its scalar and names the key in
// its error. Keeping them in one table is what makes unknown keys detectable.
using Setter = std::function<Status(const std::string& value, DaemonConfig&)>;

// Integers as YAML 1.2 writes them: decimal (a leading zero too: 010 is ten, not eight), 0x hex,
// 0o octal.
Status ParseUint(const std::string& key, const std::string& value, uint64_t max, uint64_t& out) {
  int base = 10;
  size_t skip = 0;
  if (value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'o')) {
    base = value[1] == 'x' ? 16 : 8;
    skip = 2;
  }
  const char* digits = value.c_str() + skip;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(digits, &end, base);
  if (value.empty() || !std::isxdigit(static_cast<unsigned char>(digits[0])) || *end != '\0' ||
      errno != 0 || v > max) {
    return InvalidArgument(key + ": expected a whole number up to " + std::to_string(max) +
                           ", got '" + value + "'");
  }
  out = v;
  return Status::Ok();
}

template <typename T>
Setter Uint(T DaemonConfig::*field, uint64_t max, const std::string& key) {
  return [=](const std::string& value, DaemonConfig& c) {
    uint64_t v = 0;
    KVTIER_RETURN_IF_ERROR(ParseUint(key, value, max, v));
    c.*field = static_cast<T>(v);
    return Status::Ok();
  };
}

Setter Size(uint64_t DaemonConfig::*field, const std::string& key, bool allow_auto) {
  return [=](const std::string& value, DaemonConfig& c) {
    if (allow_auto && value == "auto") {
      c.*field = 0;
      return Status::Ok();
    }
    Result<uint64_t> bytes = ParseBytes(value);
    if (!bytes.ok()) return InvalidArgument(key + ": " + bytes.status().message());
    // 0 stands for "auto" inside the config; written out it would read as "off", which it is
    // for the GPU and NVMe tiers, and got a host tier sized from RAM (and locked) instead.
    if (allow_auto && *bytes == 0) {
      return InvalidArgument(key + ": 0 is not a size here; write auto to have it sized for you");
    }
    c.*field = *bytes;
    return Status::Ok();
  };
}

// Like Size, with "auto" kept as DaemonConfig::kAutoBytes (0 already means "off" for these).
Setter SizeOrAuto(uint64_t DaemonConfig::*field, const std::string& key) {
  return [=](const std::string& value, DaemonConfig& c) {
    if (value == "auto") {
      c.*field = DaemonConfig::kAutoBytes;
      return Status::Ok();
    }
    return Size(field, key, false)(value, c);
  };
}

// A fraction in (0, 1], or [0, 1] when `zero_ok` (a share that may be none).
Status ParseFraction(const std::string& key, const std::string& value, double& out,
                     bool zero_ok = false) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  const bool in_range = (zero_ok ? v >= 0.0 : v > 0.0) && v <= 1.0;
  if (value.empty() || *end != '\0' || !in_range) {
    return InvalidArgument(key + ": expected a fraction in " + (zero_ok ? "[0, 1]" : "(0, 1]") +
                           ", got '" + value + "'");
  }
  out = v;
  return Status::Ok();
}

Setter Fraction(double DaemonConfig::*field, const std::string& key, bool zero_ok = false) {
  return [=](const std::string& value, DaemonConfig& c) {
    return ParseFraction(key, value, c.*field, zero_ok);
  };
}

Setter Text(std::string DaemonConfig::*field) {
  return [=](const std::string& value, DaemonConfig& c) {
    c.*field = value;
    return Status::Ok();
  };
}

Setter Bool(bool DaemonConfig::*field, const std::string& key) {
  return [=](const std::string& value, DaemonConfig& c) {
    if (value == "true" || value == "yes" || value == "on") {
      c.*field = true;
    } else if (value == "false" || value == "no" || value == "off") {
      c.*field = false;
    } else {
      return InvalidArgument(key + ": expected true or false, got '" + value + "'");
    }
    return Status::Ok();
  };
}

Status ParseMode(const std::string& value, DaemonConfig& c) {
  char* end = nullptr;
  unsigned long mode = std::strtoul(value.c_str(), &end, 8);
  if (value.empty() || *end != '\0' || mode > 0777) {
    return InvalidArgument("listen.unix_mode: expected an octal mode such as 0660, got '" + value +
                           "'");
  }
  c.unix_mode = static_cast<uint32_t>(mode);
  return Status::Ok();
}

const std::map<std::string, Setter>& Setters() {
  static const std::map<std::string, Setter> kSetters = {
      {"listen.unix", Text(&DaemonConfig::unix_path)},
      {"listen.unix_mode", ParseMode},
      {"listen.tcp_host", Text(&DaemonConfig::tcp_host)},
      {"listen.port", Uint(&DaemonConfig::tcp_port, 65535, "listen.port")},
      {"listen.http_host", Text(&DaemonConfig::http_host)},
      {"listen.http_port", Uint(&DaemonConfig::http_port, 65535, "listen.http_port")},
      {"listen.password", Text(&DaemonConfig::password)},
      {"tiers.host_bytes", Size(&DaemonConfig::host_bytes, "tiers.host_bytes", true)},
      {"tiers.slab_bytes", Size(&DaemonConfig::slab_bytes, "tiers.slab_bytes", true)},
      {"tiers.huge_pages", Bool(&DaemonConfig::huge_pages, "tiers.huge_pages")},
      {"tiers.mlock", Bool(&DaemonConfig::mlock, "tiers.mlock")},
      {"tiers.data_dir", Text(&DaemonConfig::data_dir)},
      {"nvme.bytes", SizeOrAuto(&DaemonConfig::nvme_bytes, "nvme.bytes")},
      {"nvme.io_backend", Text(&DaemonConfig::nvme_io_backend)},
      {"nvme.queue_depth", Uint(&DaemonConfig::nvme_queue_depth, 4096, "nvme.queue_depth")},
      {"nvme.rings", Uint(&DaemonConfig::nvme_rings, 64, "nvme.rings")},
      {"nvme.direct_io", Bool(&DaemonConfig::nvme_direct_io, "nvme.direct_io")},
      {"nvme.promote_on_hit", Bool(&DaemonConfig::nvme_promote_on_hit, "nvme.promote_on_hit")},
      {"nvme.admission", Text(&DaemonConfig::nvme_admission)},
      {"nvme.write_through", Bool(&DaemonConfig::nvme_write_through, "nvme.write_through")},
      {"nvme.sync_interval_ms",
       Uint(&DaemonConfig::nvme_sync_interval_ms, 3'600'000, "nvme.sync_interval_ms")},
      {"nvme.cache_sync_interval_ms",
       Uint(&DaemonConfig::nvme_cache_sync_interval_ms, 86'400'000, "nvme.cache_sync_interval_ms")},
      {"nvme.cold_start", Bool(&DaemonConfig::cold_start, "nvme.cold_start")},
      {"gpu.bytes", SizeOrAuto(&DaemonConfig::gpu_bytes, "gpu.bytes")},
      {"gpu.device", Uint(&DaemonConfig::gpu_device, 1023, "gpu.device")},
      {"gpu.fake", Bool(&DaemonConfig::gpu_fake, "gpu.fake")},
      {"gpu.copy_lanes", Uint(&DaemonConfig::gpu_copy_lanes, 64, "gpu.copy_lanes")},
      {"gpu.promotion", Text(&DaemonConfig::gpu_promotion)},
      {"gpu.promote_after_reads",
       Uint(&DaemonConfig::gpu_promote_after_reads, 255, "gpu.promote_after_reads")},
      {"gpu.promote_window_ms",
       Uint(&DaemonConfig::gpu_promote_window_ms, 86'400'000, "gpu.promote_window_ms")},
      {"gpu.detach_timeout_ms",
       Uint(&DaemonConfig::gpu_detach_timeout_ms, 600'000, "gpu.detach_timeout_ms")},
      {"placement.high_watermark",
       Fraction(&DaemonConfig::high_watermark, "placement.high_watermark")},
      {"placement.low_watermark",
       Fraction(&DaemonConfig::low_watermark, "placement.low_watermark")},
      {"placement.mover_threads",
       Uint(&DaemonConfig::mover_threads, 64, "placement.mover_threads")},
      {"placement.write_depth_bytes",
       Size(&DaemonConfig::write_depth_bytes, "placement.write_depth_bytes", false)},
      {"placement.when_disk_lags", Text(&DaemonConfig::when_disk_lags)},
      {"placement.nvme_copy_share",
       Fraction(&DaemonConfig::nvme_copy_share, "placement.nvme_copy_share", true)},
      {"placement.mover_cpu_priority", Text(&DaemonConfig::mover_cpu_priority)},
      {"shutdown.flush", Bool(&DaemonConfig::shutdown_flush, "shutdown.flush")},
      {"shutdown.flush_seconds",
       Uint(&DaemonConfig::shutdown_flush_seconds, 86'400, "shutdown.flush_seconds")},
      {"store.eviction_policy", Text(&DaemonConfig::eviction_policy)},
      {"store.gpu_eviction_policy", Text(&DaemonConfig::gpu_eviction_policy)},
      {"store.host_eviction_policy", Text(&DaemonConfig::host_eviction_policy)},
      {"store.nvme_eviction_policy", Text(&DaemonConfig::nvme_eviction_policy)},
      {"store.lease_timeout_ms",
       Uint(&DaemonConfig::lease_timeout_ms, 86'400'000, "store.lease_timeout_ms")},
      {"store.reservation_timeout_ms",
       Uint(&DaemonConfig::reservation_timeout_ms, 86'400'000, "store.reservation_timeout_ms")},
      {"limits.max_bulk_bytes",
       Size(&DaemonConfig::max_bulk_bytes, "limits.max_bulk_bytes", false)},
      {"limits.max_array_len",
       Uint(&DaemonConfig::max_array_len, 1ull << 31, "limits.max_array_len")},
      {"limits.max_inline_bytes",
       Size(&DaemonConfig::max_inline_bytes, "limits.max_inline_bytes", false)},
      {"limits.max_key_bytes", Size(&DaemonConfig::max_key_bytes, "limits.max_key_bytes", false)},
      {"limits.max_generic_name_bytes",
       Size(&DaemonConfig::max_generic_name_bytes, "limits.max_generic_name_bytes", false)},
      {"limits.max_keys_reply",
       Uint(&DaemonConfig::max_keys_reply, 1ull << 32, "limits.max_keys_reply")},
      {"limits.max_lookup_keys",
       Uint(&DaemonConfig::max_lookup_keys, 1ull << 24, "limits.max_lookup_keys")},
      {"limits.max_inflight_bytes_per_client", Size(&DaemonConfig::max_inflight_bytes_per_client,
                                                    "limits.max_inflight_bytes_per_client", false)},
      {"limits.idle_timeout_ms",
       Uint(&DaemonConfig::idle_timeout_ms, 86'400'000, "limits.idle_timeout_ms")},
      {"limits.mover_wait_ms",
       Uint(&DaemonConfig::mover_wait_ms, 3'600'000, "limits.mover_wait_ms")},
      {"limits.reader_wait_ms",
       Uint(&DaemonConfig::reader_wait_ms, 3'600'000, "limits.reader_wait_ms")},
      {"limits.max_clients", Uint(&DaemonConfig::max_clients, 1'000'000, "limits.max_clients")},
      {"limits.max_leases", Uint(&DaemonConfig::max_leases, 1ull << 32, "limits.max_leases")},
      {"limits.max_reservations",
       Uint(&DaemonConfig::max_reservations, 1ull << 32, "limits.max_reservations")},
      {"limits.departure_log_entries",
       Uint(&DaemonConfig::departure_log_entries, 1ull << 24, "limits.departure_log_entries")},
      {"metrics.histograms", Bool(&DaemonConfig::latency_histograms, "metrics.histograms")},
      {"metrics.history", Bool(&DaemonConfig::history, "metrics.history")},
      {"metrics.history_interval_ms",
       Uint(&DaemonConfig::history_interval_ms, 3'600'000, "metrics.history_interval_ms")},
      {"metrics.history_samples",
       Uint(&DaemonConfig::history_samples, 100'000, "metrics.history_samples")},
      {"remote.url", Text(&DaemonConfig::remote_url)},
      {"remote.user", Text(&DaemonConfig::remote_user)},
      {"remote.password", Text(&DaemonConfig::remote_password)},
      {"remote.ttl_seconds",
       Uint(&DaemonConfig::remote_ttl_seconds, 365ull * 86'400, "remote.ttl_seconds")},
      {"remote.lookup_timeout_ms",
       Uint(&DaemonConfig::remote_lookup_timeout_ms, 60'000, "remote.lookup_timeout_ms")},
      {"remote.timeout_ms", Uint(&DaemonConfig::remote_timeout_ms, 600'000, "remote.timeout_ms")},
      {"remote.connect_timeout_ms",
       Uint(&DaemonConfig::remote_connect_timeout_ms, 600'000, "remote.connect_timeout_ms")},
      {"remote.write_through", Bool(&DaemonConfig::remote_write_through, "remote.write_through")},
      {"remote.lookups_on_replicas",
       Bool(&DaemonConfig::remote_lookups_on_replicas, "remote.lookups_on_replicas")},
      {"remote.tls_ca_file", Text(&DaemonConfig::remote_tls_ca_file)},
      {"remote.tls_cert_file", Text(&DaemonConfig::remote_tls_cert_file)},
      {"remote.tls_key_file", Text(&DaemonConfig::remote_tls_key_file)},
      {"remote.tls_server_name", Text(&DaemonConfig::remote_tls_server_name)},
      {"server.io_threads", Uint(&DaemonConfig::io_threads, 256, "server.io_threads")},
      {"server.log_level", Text(&DaemonConfig::log_level)},
  };
  return kSetters;
}

// The keys that hold a list rather than a scalar; ApplyNode reads them itself.
bool IsListKey(const std::string& key) {
  return key == "nvme.paths" || key == "listen.allowed_uids";
}

// True when `key` names a section of the file ("nvme"): the part before the dot of some key.
bool IsSection(const std::string& key) {
  const std::string prefix = key + ".";
  auto it = Setters().lower_bound(prefix);
  return it != Setters().end() && it->first.starts_with(prefix);
}

Status ApplyNode(const YAML::Node& node, const std::string& prefix, const std::string& source,
                 DaemonConfig& config) {
  for (const auto& entry : node) {
    const std::string name = entry.first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const YAML::Node& value = entry.second;
    if (key == "quotas") {
      KVTIER_RETURN_IF_ERROR(ApplyQuotaNode(value, source, config));
      continue;
    }
    // A section is a mapping, or nothing at all: a section whose keys are all commented out
    // reads as null and means "the defaults", as an empty mapping does.
    if (IsSection(key)) {
      if (value.IsNull()) continue;
      if (!value.IsMap()) {
        return InvalidArgument(source + ": " + key + ": expected a section of keys (key: value)");
      }
      KVTIER_RETURN_IF_ERROR(ApplyNode(value, key, source, config));
      continue;
    }
    // Checked before the shape of the value: a misspelt section given as a mapping ("foo: {}")
    // must be refused as unknown, not read as a section without keys.
    if (!IsListKey(key) && Setters().find(key) == Setters().end()) {
      return InvalidArgument(source + ": unknown key '" + key + "'");
    }
    if (key == "nvme.paths") {
      if (!value.IsSequence()) return InvalidArgument(source + ": " + key + ": expected a list");
      config.nvme_paths.clear();
      for (const auto& path : value) config.nvme_paths.push_back(path.as<std::string>());
      continue;
    }
    if (key == "listen.allowed_uids") {
      if (!value.IsSequence()) return InvalidArgument(source + ": " + key + ": expected a list");
      config.allowed_uids.clear();
      for (const auto& uid : value) {
        uint64_t v = 0;
        KVTIER_RETURN_IF_ERROR(ParseUint(key, uid.as<std::string>(), 0xfffffffe, v));
        config.allowed_uids.push_back(static_cast<uid_t>(v));
      }
      continue;
    }
    auto setter = Setters().find(key);
    if (!value.IsScalar()) return InvalidArgument(source + ": " + key + ": expected a value");
    Status st = setter->second(value.Scalar(), config);
    if (!st.ok()) return InvalidArgument(source + ": " + st.message());
  }
  return Status::Ok();
}

// The --help footer: every key the config file takes, by section, so that a key that has no flag
// (gpu.promote_after_reads) is still discoverable from the binary.
std::string ConfigKeysHelp() {
  std::map<std::string, std::string> sections;
  auto add = [&](const std::string& key) {
    const size_t dot = key.find('.');
    std::string& line = sections[key.substr(0, dot)];
    line += (line.empty() ? "" : ", ") + key.substr(dot + 1);
  };
  for (const auto& [key, setter] : Setters()) add(key);
  add("listen.allowed_uids");
  add("nvme.paths");
  add("quotas.tenants.<salt>.<tier>");
  add("quotas.namespaces.<id>.<tier>");
  std::string out = "Config file keys (--config FILE; deploy/kvtierd.yaml explains each):\n";
  for (const auto& [section, keys] : sections) out += "  " + section + ": " + keys + "\n";
  return out;
}

// The bytes of the config file. Anything but a regular file is refused: a directory opens and
// reads as empty through an ifstream, and kvtierd then ran on its embedded defaults without a
// word. Read errors are reported, not taken for the end of the file.
Result<std::string> ReadFile(const std::string& path) {
  const std::string what = "--config: cannot read '" + path + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) return ErrnoStatus(errno, what);
  struct stat st {};
  if (fstat(fileno(file.get()), &st) != 0) return ErrnoStatus(errno, what);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument("--config: '" + path + "' is not a regular file");
  }
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) return ErrnoStatus(errno, what);
  return text;
}

// `value` must be one of `names`: the policy lists of the modules that build the policies, so
// that the config never accepts a name they do not know, nor refuses one they added.
template <typename Names>
Status CheckPolicyName(std::string_view key, const std::string& value, const Names& names) {
  std::string known;
  for (const auto& name : names) {
    if (name == value) return Status::Ok();
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  return InvalidArgument(std::string(key) + ": unknown policy '" + value + "' (known: " + known +
                         ")");
}

Status FinalizeGpu(const DaemonConfig& config) {
  if (config.gpu_fake && (config.gpu_bytes == DaemonConfig::kAutoBytes || config.gpu_bytes == 0)) {
    return InvalidArgument(
        "gpu.fake: needs an explicit gpu.bytes (the fake has no device to size it from)");
  }
  if (config.gpu_bytes != 0 && config.gpu_bytes != DaemonConfig::kAutoBytes &&
      config.gpu_bytes < (1ull << 20)) {
    return InvalidArgument("gpu.bytes: at least 1MiB (or 0 to turn the tier off), got " +
                           std::to_string(config.gpu_bytes));
  }
  if (config.gpu_copy_lanes == 0) return InvalidArgument("gpu.copy_lanes: must be positive");
  KVTIER_RETURN_IF_ERROR(
      CheckPolicyName("gpu.promotion", config.gpu_promotion, placement::GpuPromotionPolicyNames()));
  if (config.gpu_promote_after_reads == 0) {
    return InvalidArgument("gpu.promote_after_reads: must be 1 or more");
  }
  if (config.gpu_promote_window_ms == 0) {
    return InvalidArgument("gpu.promote_window_ms: must be positive");
  }
  return Status::Ok();
}

// A quota in a tier that is off protects nothing: the operator meant a tier the daemon lacks.
// Checked here, with the sizes resolved, so that the start stops before any tier is created.
// (A GPU tier configured but not found on the machine is caught when the tiers open, before
// NVMe: daemon/kvtierd/daemon_tiers.cc.)
Status CheckQuotaTiers(const DaemonConfig& config) {
  for (const DaemonConfig::Quota& q : config.quotas) {
    std::string why;
    if (q.tier == TierId::kGpu && config.gpu_bytes == 0) why = "gpu.bytes is 0";
    if (q.tier == TierId::kNvme && config.nvme_bytes == 0) {
      why = config.nvme_bytes_auto ? config.nvme_bytes_note : "nvme.bytes is 0";
    }
    if (why.empty()) continue;
    return InvalidArgument(std::string("quotas.") + (q.is_namespace ? "namespaces." : "tenants.") +
                           q.subject + "." + std::string(TierName(q.tier)) + ": no " +
                           std::string(TierName(q.tier)) + " tier to set a quota in (" + why + ")");
  }
  return Status::Ok();
}

}  // namespace

uint64_t MaxCommandBytes(uint64_t max_bulk_bytes, uint64_t max_key_bytes) {
  // The array and bulk headers, the command's name and its options (SET ... EX n NX, KVT.PUT's
  // namespace): far below this.
  constexpr uint64_t kFramingBytes = 64 << 10;
  uint64_t sum = 0;
  if (__builtin_add_overflow(max_bulk_bytes, max_key_bytes, &sum) ||
      __builtin_add_overflow(sum, kFramingBytes, &sum)) {
    return UINT64_MAX;  // no command can be that long anyway: the bulk limit is what binds
  }
  return std::max(kDefaultMaxCommandBytes, sum);
}

uint32_t DefaultIoThreads(unsigned hardware_threads) {
  return std::clamp<uint32_t>(hardware_threads / 2, 1, 8);
}

Status ApplyYaml(const std::string& yaml_text, const std::string& source, DaemonConfig& config) {
  try {
    YAML::Node root = YAML::Load(yaml_text);
    if (root.IsNull()) return Status::Ok();
    if (!root.IsMap()) return InvalidArgument(source + ": expected a mapping at the top level");
    return ApplyNode(root, "", source, config);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ": " + e.what());
  }
}

Status Finalize(DaemonConfig& config) {
  if (config.unix_path.empty() && config.tcp_port == 0) {
    return InvalidArgument("listen: both the Unix socket and TCP are off; nothing to serve");
  }
  // The socket's path must fit sockaddr_un; found at bind time, it failed the start after the
  // tiers had been opened (the NVMe file preallocated).
  if (config.unix_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument("listen.unix (--unix): '" + config.unix_path + "' is " +
                           std::to_string(config.unix_path.size()) + " bytes, at most " +
                           std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                           " fit a Unix socket address");
  }
  KVTIER_ASSIGN_OR_RETURN(config.tcp_host, ListenAddress("listen.tcp_host", config.tcp_host));
  KVTIER_ASSIGN_OR_RETURN(config.http_host, ListenAddress("listen.http_host", config.http_host));
  if (config.tcp_port != 0 && !IsLoopbackAddress(config.tcp_host) && config.password.empty()) {
    return InvalidArgument("listen.tcp_host: '" + config.tcp_host +
                           "' is not a loopback address; set listen.password (or $" + kPasswordEnv +
                           ") before serving on the network");
  }
  if (config.host_bytes == 0) config.host_bytes = AutoHostBytes();
  if (config.host_bytes < (1ull << 20)) {
    return InvalidArgument("tiers.host_bytes: at least 1MiB, got " +
                           std::to_string(config.host_bytes));
  }
  if (config.slab_bytes == 0) config.slab_bytes = AutoSlabBytes(config.host_bytes);
  if (config.slab_bytes < 4096 || config.slab_bytes % 4096 != 0) {
    return InvalidArgument("tiers.slab_bytes: must be a positive multiple of 4KiB");
  }
  KVTIER_RETURN_IF_ERROR(CheckPolicyName("store.eviction_policy", config.eviction_policy,
                                         index::EvictionPolicyNames()));
  for (const auto& [key, value] :
       {std::pair{"store.gpu_eviction_policy", &config.gpu_eviction_policy},
        std::pair{"store.host_eviction_policy", &config.host_eviction_policy},
        std::pair{"store.nvme_eviction_policy", &config.nvme_eviction_policy}}) {
    if (!value->empty()) {
      KVTIER_RETURN_IF_ERROR(CheckPolicyName(key, *value, index::EvictionPolicyNames()));
    }
  }
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), config.log_level) == std::end(kLevels)) {
    return InvalidArgument("server.log_level: expected trace, debug, info, warn, error or off");
  }
  if (config.lease_timeout_ms == 0 || config.reservation_timeout_ms == 0) {
    return InvalidArgument("store: lease and reservation timeouts must be positive");
  }
  // All here, before any tier opens: the server refuses some of them too, but only after the
  // tiers were opened (and an NVMe file preallocated); and 0 leases or reservations would refuse
  // every read or put of a daemon that says it is ready.
  for (const auto& [key, value] :
       {std::pair{"limits.max_bulk_bytes", config.max_bulk_bytes},
        std::pair{"limits.max_array_len", config.max_array_len},
        std::pair{"limits.max_clients", config.max_clients},
        std::pair{"limits.max_leases", config.max_leases},
        std::pair{"limits.max_reservations", config.max_reservations},
        std::pair{"limits.max_key_bytes", config.max_key_bytes},
        std::pair{"limits.max_inline_bytes", config.max_inline_bytes},
        std::pair{"limits.max_lookup_keys", config.max_lookup_keys},
        std::pair{"limits.max_inflight_bytes_per_client", config.max_inflight_bytes_per_client}}) {
    if (value == 0) return InvalidArgument(std::string(key) + ": must be positive");
  }
  if (config.tcp_port != 0 && config.tcp_port == config.http_port &&
      (config.tcp_host == config.http_host || IsWildcardAddress(config.tcp_host) ||
       IsWildcardAddress(config.http_host))) {
    return InvalidArgument("listen.http_port: " + std::to_string(config.http_port) +
                           " is listen.port too; the two listeners need ports of their own");
  }
  config.max_command_bytes = MaxCommandBytes(config.max_bulk_bytes, config.max_key_bytes);
  // The file's key is bounded as it is read; the flag only here, before any tier opens (the
  // server would refuse it too, after the tiers had been opened and recovered).
  if (config.io_threads > 256) {
    return InvalidArgument("server.io_threads (--io-threads): at most 256, got " +
                           std::to_string(config.io_threads));
  }
  if (config.io_threads == 0)
    config.io_threads = DefaultIoThreads(std::thread::hardware_concurrency());
  if (config.data_dir.empty()) config.data_dir = DefaultDataDir();
  if (config.nvme_bytes == DaemonConfig::kAutoBytes) {
    AutoNvmeSize size = AutoNvmeBytes(config.data_dir, config.nvme_paths);
    config.nvme_bytes = size.bytes;
    config.nvme_bytes_auto = true;
    config.nvme_bytes_note = std::move(size.note);
  }
  if (config.nvme_bytes != 0 && config.nvme_bytes < (8ull << 20)) {
    return InvalidArgument("nvme.bytes: at least 8MiB (or 0 to turn the tier off), got " +
                           std::to_string(config.nvme_bytes));
  }
  // Write-through promises that an acknowledged put is on NVMe; without the tier every put
  // would still answer OK with nothing durable.
  if (config.nvme_write_through && config.nvme_bytes == 0) {
    return InvalidArgument(
        "nvme.write_through: needs an NVMe tier, and there is none (" +
        (config.nvme_bytes_auto ? config.nvme_bytes_note : std::string("nvme.bytes is 0")) +
        "); set nvme.bytes or turn write_through off");
  }
  if (config.nvme_io_backend != "auto" && config.nvme_io_backend != "io_uring" &&
      config.nvme_io_backend != "threads") {
    return InvalidArgument("nvme.io_backend: expected auto, io_uring or threads, got '" +
                           config.nvme_io_backend + "'");
  }
  KVTIER_RETURN_IF_ERROR(
      CheckPolicyName("nvme.admission", config.nvme_admission, placement::AdmissionPolicyNames()));
  if (config.nvme_queue_depth == 0 || config.nvme_rings == 0) {
    return InvalidArgument("nvme: queue_depth and rings must be positive");
  }
  KVTIER_RETURN_IF_ERROR(FinalizeGpu(config));
  KVTIER_RETURN_IF_ERROR(CheckQuotaTiers(config));
  if (config.mover_threads == 0) {
    return InvalidArgument("placement.mover_threads: must be at least 1");
  }
  if (config.mover_cpu_priority != "low" && config.mover_cpu_priority != "normal") {
    return InvalidArgument("placement.mover_cpu_priority: expected low or normal, got '" +
                           config.mover_cpu_priority + "'");
  }
  if (config.when_disk_lags != "drop" && config.when_disk_lags != "wait") {
    return InvalidArgument("placement.when_disk_lags: expected drop or wait, got '" +
                           config.when_disk_lags + "'");
  }
  if (config.low_watermark >= config.high_watermark) {
    return InvalidArgument("placement.low_watermark: must be below placement.high_watermark");
  }
  if (config.history && config.history_interval_ms < 100) {
    return InvalidArgument("metrics.history_interval_ms: at least 100, got " +
                           std::to_string(config.history_interval_ms));
  }
  if (config.history && config.history_samples < 2) {
    return InvalidArgument("metrics.history_samples: at least 2, got " +
                           std::to_string(config.history_samples));
  }
  return FinalizeRemote(config);
}

Result<ParseOutcome> ParseCommandLine(int argc, const char* const* argv) {
  ParseOutcome outcome;
  DaemonConfig& c = outcome.config;
  c.unix_path = DefaultSocketPath();
  CLI::App app{"kvtierd: the kvtier KV-cache daemon (see deploy/kvtierd.yaml for every key)",
               "kvtierd"};
  std::string config_file, host_bytes, nvme_bytes, gpu_bytes, log_level, policy;
  bool cold_start = false;
  std::optional<std::string> unix_path, data_dir, password, remote_url;
  std::optional<uint16_t> port, http_port;
  std::optional<uint32_t> io_threads;
  app.footer(ConfigKeysHelp());
  app.add_option("--config", config_file, "YAML config file; flags override its values");
  app.add_option("--unix", unix_path, "Unix socket path (\"\" turns it off)");
  app.add_option("--port", port, "TCP port on listen.tcp_host (0 turns TCP off); default 6380");
  app.add_option("--http-port", http_port,
                 "HTTP port for /metrics, /stats and the dashboard (0 off); default 9480");
  app.add_option("--host-bytes", host_bytes,
                 "Host tier size, e.g. 512MiB, 4GiB, or auto (a quarter of free RAM, cap 64GiB)");
  app.add_option("--data-dir", data_dir, "Directory for the NVMe tier and state");
  app.add_option("--nvme-bytes", nvme_bytes,
                 "NVMe tier size, e.g. 64GiB; 0 turns it off; auto (a tenth of the free space "
                 "of the data directory's file system, or of nvme.paths' ones; cap 16GiB)");
  app.add_option(
      "--gpu-bytes", gpu_bytes,
      std::string("GPU tier size, e.g. 8GiB; 0 turns it off; auto (") + kAutoGpuBytesMeaning + ")");
  app.add_flag("--cold-start", cold_start,
               "Discard the NVMe tier's blocks at start (default: serve them again)");
  app.add_option("--password", password,
                 "Password clients must AUTH with. Every user of the node can read it in the "
                 "process list: prefer $KVTIER_PASSWORD (which overrides listen.password) or "
                 "listen.password in the config file");
  app.add_option("--remote", remote_url,
                 "Remote tier: redis://[user@]host:port[,host:port...] (a Redis Cluster or "
                 "server; rediss:// for TLS, see remote.tls_*; the password goes in "
                 "remote.password or $KVTIER_REMOTE_PASSWORD)");
  app.add_option("--policy", policy,
                 "Eviction policy of every tier without its own store.*_eviction_policy: sticky "
                 "(default), lru, arc, s3fifo or tinylfu");
  app.add_option("--io-threads", io_threads,
                 "Network threads (0: half the cores, at least 1, at most 8)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    outcome.help_requested = true;
    outcome.help_text = app.help();
    return outcome;
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(e.what());
  }
  if (!config_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::string text, ReadFile(config_file));
    KVTIER_RETURN_IF_ERROR(ApplyYaml(text, config_file, c));
  }
  if (unix_path) c.unix_path = *unix_path;
  if (port) c.tcp_port = *port;
  if (http_port) c.http_port = *http_port;
  if (data_dir) c.data_dir = *data_dir;
  // Both passwords: the flag, else the environment, else the file (a Secret handed to the
  // environment overrides a config map's key, as the kvtier CLI's --password does its variable).
  if (const char* pw = std::getenv(kPasswordEnv); pw != nullptr && *pw != '\0') c.password = pw;
  if (password) c.password = *password;
  if (remote_url) c.remote_url = *remote_url;
  if (const char* pw = std::getenv(kRemotePasswordEnv); pw != nullptr && *pw != '\0') {
    c.remote_password = pw;
  }
  if (io_threads) c.io_threads = *io_threads;
  if (!policy.empty()) c.eviction_policy = policy;
  if (!log_level.empty()) c.log_level = log_level;
  if (cold_start) c.cold_start = true;
  if (!nvme_bytes.empty()) {
    Status st = SizeOrAuto(&DaemonConfig::nvme_bytes, "--nvme-bytes")(nvme_bytes, c);
    if (!st.ok()) return st;
  }
  if (!gpu_bytes.empty()) {
    Status st = SizeOrAuto(&DaemonConfig::gpu_bytes, "--gpu-bytes")(gpu_bytes, c);
    if (!st.ok()) return st;
  }
  if (!host_bytes.empty()) {
    Status st = Size(&DaemonConfig::host_bytes, "--host-bytes", true)(host_bytes, c);
    if (!st.ok()) return st;
  }
  // The rules across keys see the file and the flags together; the file is named so that an
  // operator knows where to look, as the errors of its own keys do.
  if (Status st = Finalize(c); !st.ok()) {
    if (config_file.empty()) return st;
    return Status(st.code(), st.message() + " (--config " + config_file + " and the flags)");
  }
  return outcome;
}

}  // namespace kvtier::config

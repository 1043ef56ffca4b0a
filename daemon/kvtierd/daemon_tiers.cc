#include "daemon/kvtierd/daemon_tiers.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/units.h"
#include "hashing/payload_checksum.h"
#include "tiers/gpu/gpu_tier_factory.h"

namespace kvtier::daemon {
namespace {

Result<std::unique_ptr<tiers::nvme::NvmeTier>> OpenNvme(const config::DaemonConfig& c,
                                                        const tiers::HostArena& arena) {
  tiers::nvme::NvmeTier::Options o;
  o.data_dir = c.data_dir + "/nvme";
  o.data_paths = c.nvme_paths;
  o.capacity_bytes = c.nvme_bytes;
  o.keep_formatted_capacity = c.nvme_bytes_auto;
  KVTIER_ASSIGN_OR_RETURN(o.io.kind, tiers::nvme::ParseIoBackendKind(c.nvme_io_backend));
  o.io.queue_depth = static_cast<uint32_t>(c.nvme_queue_depth);
  o.io.ring_count = static_cast<uint32_t>(c.nvme_rings);
  // I/O goes straight between arena slots and the device.
  o.registered_region = arena.base();
  o.registered_region_bytes = arena.size();
  o.cold_start = c.cold_start;
  o.direct_io = c.nvme_direct_io;
  o.sync_writes = c.nvme_sync_interval_ms == 0;
  return tiers::nvme::NvmeTier::Open(o);
}

// The GPU tier, or why there is none (a note for the stats; the daemon serves without it).
void OpenGpu(const config::DaemonConfig& c, DaemonTiers& t) {
  if (c.gpu_bytes == 0) {
    t.gpu_note = "no GPU tier: disabled in config (gpu.bytes is 0)";
    spdlog::info("{}", t.gpu_note);
    return;
  }
  tiers::GpuTierOptions o;
  o.fake = c.gpu_fake;
  o.device = static_cast<int>(c.gpu_device);
  o.capacity_bytes = c.gpu_bytes == config::DaemonConfig::kAutoBytes ? 0 : c.gpu_bytes;
  // The host arena's slab size: both tiers hold blocks of the same sizes.
  o.slab_bytes = c.slab_bytes;
  o.copy_lanes = c.gpu_copy_lanes;
  Result<std::unique_ptr<tiers::DeviceTier>> gpu = tiers::MakeGpuTier(o);
  if (!gpu.ok()) {
    t.gpu_note = gpu.status().message();
    // No device or no CUDA is how most machines are; a size the device cannot give, or a broken
    // driver, is something to fix.
    const bool expected = gpu.status().code() == StatusCode::kNotFound ||
                          gpu.status().code() == StatusCode::kRejected;
    if (expected) {
      spdlog::info("{}", t.gpu_note);
    } else {
      spdlog::error("{} (serving from host memory and NVMe only)", t.gpu_note);
    }
    return;
  }
  t.gpu = std::move(gpu).value();
  spdlog::info("GPU tier: {} on {}, promotion: {}", FormatBytes(t.gpu->Stats().capacity_bytes),
               c.gpu_fake ? "the host-memory fake (gpu.fake)"
                          : "CUDA device " + std::to_string(c.gpu_device),
               c.gpu_promotion == "off"
                   ? std::string("off")
                   : "after " + std::to_string(c.gpu_promote_after_reads) + " reads within " +
                         std::to_string(c.gpu_promote_window_ms) + " ms");
}

}  // namespace

std::vector<tiers::Tier*> DaemonTiers::chain() const {
  std::vector<tiers::Tier*> list;
  if (gpu) list.push_back(gpu.get());
  list.push_back(host.get());
  if (nvme) list.push_back(nvme.get());
  return list;
}

Result<DaemonTiers> OpenTiers(const config::DaemonConfig& c) {
  DaemonTiers t;
  // The arena is locked (faulted in) at start and filled later: a tier larger than the machine
  // gets kvtierd killed for memory, and the kernel's choice may be the engine beside it. One
  // larger than what is available now only is not locked at start: a restart finds the old
  // arena still held by clients that have not attached again yet, and refusing would keep it so.
  const config::HostMemory memory = config::HostMemoryNow(c.huge_pages);
  if (c.host_bytes > memory.total) {
    return Rejected("tiers.host_bytes (--host-bytes) " + FormatBytes(c.host_bytes) +
                    " is more than this machine's " + FormatBytes(memory.total) +
                    " of memory (MemTotal, or kvtierd's cgroup limit): lower it, or leave it to "
                    "auto (a quarter of what is available)");
  }
  const bool fits_now = c.host_bytes <= memory.available;
  if (!fits_now) {
    spdlog::warn(
        "host tier: {} is more than the {} of memory available now: not locked at start "
        "(its pages are taken as blocks arrive), and the node may run out of memory as "
        "it fills",
        FormatBytes(c.host_bytes), FormatBytes(memory.available));
  }
  auto host = tiers::HostTier::Create({.capacity_bytes = c.host_bytes,
                                       .slab_bytes = c.slab_bytes,
                                       .try_huge_pages = c.huge_pages,
                                       .try_mlock = c.mlock && fits_now});
  if (!host.ok()) return Status(host.status().code(), "host tier: " + host.status().message());
  t.host = std::move(host).value();
  const tiers::HostArena& arena = t.host->arena();
  spdlog::info("host tier: {} ({} pages{})", FormatBytes(c.host_bytes),
               arena.huge_pages() ? "huge" : "normal",
               arena.locked() ? ", locked in RAM"
               : !arena.lock_status().ok()
                   ? ", not locked: " + arena.lock_status().message()
                   : std::string(c.mlock ? ", not locked (more than is available now)"
                                         : ", not locked (tiers.mlock is off)"));
  OpenGpu(c, t);
  // A GPU tier asked for but not found (no device, no CUDA) leaves its quotas nothing to protect;
  // said here, before the NVMe tier opens and preallocates its file, rather than by ApplyQuotas.
  for (const config::DaemonConfig::Quota& q : c.quotas) {
    if (q.tier != TierId::kGpu || t.gpu) continue;
    return NotFound(std::string("quotas.") + (q.is_namespace ? "namespaces." : "tenants.") +
                    q.subject + ".gpu: no gpu tier to set a quota in (" + t.gpu_note + ")");
  }
  // Pinning serves the copies between the arena and the GPU tier; without one it would only
  // create a CUDA context and lock RAM for nothing.
  if (t.gpu && !c.gpu_fake) {
    t.pinned_arena = cuda::PinnedHostRange::Register(arena.base(), arena.size());
    if (t.pinned_arena.pinned()) spdlog::info("host tier: registered with CUDA (pinned)");
  }
  auto remote = OpenRemote(c);
  if (!remote.ok()) return remote.status();
  t.remote = std::move(remote).value();
  if (c.nvme_bytes == 0) {
    t.nvme_note = c.nvme_bytes_auto ? c.nvme_bytes_note : "no NVMe tier: nvme.bytes is 0";
    spdlog::info("{}", t.nvme_note);
    return t;
  }
  if (c.nvme_bytes_auto) spdlog::info("{}", c.nvme_bytes_note);
  auto nvme = OpenNvme(c, arena);
  if (!nvme.ok()) return Status(nvme.status().code(), "NVMe tier: " + nvme.status().message());
  t.nvme = std::move(nvme).value();
  const tiers::nvme::NvmeStats s = t.nvme->nvme_stats();
  spdlog::info("NVMe tier: {} in {}/nvme ({} backend, {}{}; block checksums: {})",
               FormatBytes(t.nvme->Stats().capacity_bytes), c.data_dir,
               s.io_uring ? "io_uring" : "thread pool",
               s.direct_io ? "O_DIRECT" : "buffered: the file system refused O_DIRECT",
               c.cold_start ? ", cold start" : "", hashing::PayloadChecksumImplementation());
  return t;
}

Result<std::unique_ptr<tiers::remote::RedisClusterClient>> OpenRemote(
    const config::DaemonConfig& c) {
  if (c.remote_url.empty()) return std::unique_ptr<tiers::remote::RedisClusterClient>();
  // Finalize checked the URL; parsed again here rather than carried, so the config stays data.
  Result<tiers::remote::RemoteUrl> url = tiers::remote::ParseRemoteUrl(c.remote_url);
  if (!url.ok()) return Status(url.status().code(), "remote.url: " + url.status().message());
  tiers::remote::RedisClusterOptions options;
  options.seeds = url->seeds;
  options.user = c.remote_user;
  options.password = c.remote_password;
  options.connect_timeout = std::chrono::milliseconds(c.remote_connect_timeout_ms);
  // Halfway between a lookup's budget and a full call's: lookups' timeouts say nothing of a node
  // (remote.lookup_timeout_ms, 20 by default), the mover's do (remote.timeout_ms, 1,000).
  options.shortest_judged_timeout =
      std::chrono::milliseconds((c.remote_lookup_timeout_ms + c.remote_timeout_ms) / 2);
  // A store that is down at start must not keep the node's local tiers from serving: the client
  // asks again in the background. A refused password still stops the start.
  options.open_unreachable = true;
  options.lookups_on_replicas = c.remote_lookups_on_replicas;
  options.tls = {.enabled = url->tls,
                 .ca_file = c.remote_tls_ca_file,
                 .cert_file = c.remote_tls_cert_file,
                 .key_file = c.remote_tls_key_file,
                 .server_name = c.remote_tls_server_name};
  auto client = tiers::remote::RedisClusterClient::Open(std::move(options));
  if (!client.ok()) {
    return Status(client.status().code(), "remote.url: " + client.status().message());
  }
  std::string seeds;
  for (const auto& seed : url->seeds) seeds += (seeds.empty() ? "" : ",") + seed.ToString();
  // Never the password: only whether there is one.
  spdlog::info("remote tier: {} at {} ({} masters; user {}, {}, {})",
               !(*client)->reached()       ? "not answering yet"
               : (*client)->cluster_mode() ? "Redis Cluster"
                                           : "a single server",
               seeds, (*client)->stats().masters, c.remote_user.empty() ? "default" : c.remote_user,
               c.remote_password.empty() ? "no password" : "password set",
               url->tls ? "TLS" : "no TLS");
  return client;
}

size_t AdoptRecoveredBlocks(DaemonTiers& tiers, store::Store& store,
                            std::vector<tiers::nvme::RecoveredBlock> found, std::stop_token stop) {
  if (!tiers.nvme) return 0;
  const auto started = std::chrono::steady_clock::now();
  size_t adopted = 0;
  size_t handed = 0;
  store.SetPendingAdoptions(found.size());
  for (; handed < found.size() && !stop.stop_requested(); ++handed) {
    // A gauge for operators and tests: refreshed every 4096 blocks, not every one.
    if (handed % 4096 == 0) store.SetPendingAdoptions(found.size() - handed);
    const tiers::nvme::RecoveredBlock& b = found[handed];
    // Dropped since: its key was removed or written again, and the extent may be reused.
    if (!tiers.nvme->SettleRecovered(b.extent)) continue;
    Status st = store.AdoptBlock(TierId::kNvme, b.ns, b.key, b.extent, b.payload_checksum);
    if (st.ok()) {
      ++adopted;
    } else {
      tiers.nvme->Free(b.extent);
    }
  }
  store.SetPendingAdoptions(0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const tiers::nvme::NvmeStats s = tiers.nvme->nvme_stats();
  spdlog::info(
      "NVMe tier: serving {} blocks from the previous run, adopted in {:.2f} s ({} records "
      "dropped at recovery)",
      adopted, seconds, s.dropped_at_recovery);
  if (handed < found.size()) {
    spdlog::info(
        "NVMe tier: stopped before adopting {} blocks; they stay on disk for the next start",
        found.size() - handed);
  }
  return adopted;
}

store::StoreOptions StoreOptionsFrom(const config::DaemonConfig& c,
                                     tiers::remote::RemoteStore* remote) {
  store::StoreOptions o;
  o.lease_timeout_us = c.lease_timeout_ms * 1000;
  o.reservation_timeout_us = c.reservation_timeout_ms * 1000;
  o.index.policy = c.eviction_policy;
  o.index.tier_policies[static_cast<size_t>(TierId::kGpu)] = c.gpu_eviction_policy;
  o.index.tier_policies[static_cast<size_t>(TierId::kHost)] = c.host_eviction_policy;
  o.index.tier_policies[static_cast<size_t>(TierId::kNvme)] = c.nvme_eviction_policy;
  o.index.capacity_hint_blocks = 0;
  o.max_leases = c.max_leases;
  o.departure_log_entries = c.departure_log_entries;
  o.max_reservations = c.max_reservations;
  o.promote_on_read = c.nvme_promote_on_hit;
  o.nvme_admission = c.nvme_admission;
  o.nvme_write_through = c.nvme_write_through;
  o.nvme_copy_share = c.nvme_copy_share;
  // With a disk below the host tier, or the remote tier's network, every move that waits for it
  // belongs to the tier mover.
  o.background_disk_moves = c.nvme_bytes != 0 || remote != nullptr;
  o.remote.store = remote;
  o.remote.ttl = std::chrono::seconds(c.remote_ttl_seconds);
  o.remote.timeout = std::chrono::milliseconds(c.remote_timeout_ms);
  o.remote.lookup_timeout = std::chrono::milliseconds(c.remote_lookup_timeout_ms);
  // Readers wait limits.mover_wait_ms for a fetch; a prefetch is worth a batch's time at least
  // (with mover_wait_ms 0 no reader waits, and only prefetches make later reads hits).
  o.reader_wait =
      std::chrono::milliseconds(std::max<uint64_t>(c.mover_wait_ms, c.remote_timeout_ms));
  o.remote.write_through = c.remote_write_through;
  o.drop_when_disk_lags = c.when_disk_lags == "drop";
  o.gpu_promotion.policy = c.gpu_promotion;
  o.gpu_promotion.after_reads = c.gpu_promote_after_reads;
  o.gpu_promotion.window_us = c.gpu_promote_window_ms * 1000;
  o.latency_histograms = c.latency_histograms;
  return o;
}

Status ApplyQuotas(const config::DaemonConfig& config, store::Store& store) {
  for (const config::DaemonConfig::Quota& q : config.quotas) {
    store::QuotaSubject who;
    who.kind =
        q.is_namespace ? store::QuotaSubject::Kind::kNamespace : store::QuotaSubject::Kind::kTenant;
    if (q.is_namespace) {
      who.ns = NamespaceId{*Key128::FromHex(q.subject)};  // checked when the config was parsed
    } else {
      who.tenant = q.subject;
    }
    if (Status st = store.SetQuota(who, q.tier, q.bytes); !st.ok()) {
      return Status(st.code(), "quotas: " + who.ToString() + " " + std::string(TierName(q.tier)) +
                                   ": " + st.message());
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::daemon

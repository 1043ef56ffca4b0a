// DaemonTiers: the tiers kvtierd runs with, built from its configuration, and the blocks the NVMe
// tier found on disk handed to the store (warm restart).
//
// Ownership: DaemonTiers owns every tier and the CUDA registration of the host arena; the store
// borrows the tiers (chain()) and must be destroyed first, so every tier, the GPU pool included,
// lives as long as the daemon serves. Start-up only; no threads.
#pragma once

#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "common/cuda/pinned_host_range.h"
#include "common/status.h"
#include "daemon/config/daemon_config.h"
#include "daemon/store/store.h"
#include "tiers/gpu/device_tier.h"
#include "tiers/host/host_tier.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/remote/redis_cluster_client.h"

namespace kvtier::daemon {

struct DaemonTiers {
  std::unique_ptr<tiers::HostTier> host;
  // The arena registered with CUDA, so that host <-> GPU copies run at DMA speed; a no-op range
  // (with the reason in its status) without CUDA or a device. Declared after `host` so that it is
  // unregistered before the arena is unmapped.
  cuda::PinnedHostRange pinned_arena;
  std::unique_ptr<tiers::nvme::NvmeTier> nvme;  // nullptr: no NVMe tier (see nvme_note)
  std::string nvme_note;                        // why there is no NVMe tier; empty when there is
  // The device pool (or its host-memory fake, gpu.fake); nullptr: no GPU tier (see gpu_note).
  std::unique_ptr<tiers::DeviceTier> gpu;
  std::string gpu_note;  // why there is no GPU tier; empty when there is
  // The client of the remote tier's cluster (remote.url); nullptr: no remote tier. The store and
  // the mover borrow it through StoreOptions::remote.
  std::unique_ptr<tiers::remote::RedisClusterClient> remote;

  // The store's tier list, hottest first: [gpu,] host[, nvme].
  std::vector<tiers::Tier*> chain() const;
};

// Creates the host tier, registers it with CUDA where possible, creates the GPU tier where there
// is one (its absence is not an error: gpu_note says why), and opens the NVMe tier (which may find
// blocks from a previous run). Errors name the setting to fix: a data directory of an
// incompatible format version is refused here, with both versions in the message; a quota in a
// GPU tier that could not be created is kNotFound, returned before the NVMe tier opens.
Result<DaemonTiers> OpenTiers(const config::DaemonConfig& config);

// Connects to the remote tier's cluster when remote.url is set (OpenTiers calls it). Errors name
// remote.url: kPermissionDenied (the cluster refused the credentials, in its own words, never the
// password), kDeviceError (no seed answered). nullptr without remote.url.
Result<std::unique_ptr<tiers::remote::RedisClusterClient>> OpenRemote(
    const config::DaemonConfig& config);

// Hands the blocks the NVMe tier found at open (`found`, its TakeRecovered(), which the caller
// counted in Store::SetPendingAdoptions before serving) to the store, oldest first so that the
// LRU order survives the restart. Returns how many the store took; those it refuses (a key taken
// twice, or stored by a client since the start) are freed. The daemon runs it on a thread of its
// own while it serves (a block not adopted yet is a miss): `stop` ends it early, and the blocks not
// handed over yet stay on disk, recorded, for the next start.
size_t AdoptRecoveredBlocks(DaemonTiers& tiers, store::Store& store,
                            std::vector<tiers::nvme::RecoveredBlock> found,
                            std::stop_token stop = {});

// The options the store runs with; `remote` is the remote tier's client, or nullptr.
store::StoreOptions StoreOptionsFrom(const config::DaemonConfig& config,
                                     tiers::remote::RemoteStore* remote = nullptr);

// Sets the config file's quotas (config.quotas) on the store. kNotFound naming the quota when
// its tier is not configured (a quota in a tier that is off protects nothing: a mistake to say),
// kRejected past the number of quota groups.
Status ApplyQuotas(const config::DaemonConfig& config, store::Store& store);

}  // namespace kvtier::daemon

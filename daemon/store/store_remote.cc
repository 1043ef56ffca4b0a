// The store's side of the remote tier (docs/scale-out.md): the blocks the mover drops from the
// last local tier are written to the remote store first (PublishToRemote), and room for a put is
// made through that same path (MakeRoomByPublishing), so that a block leaves the node for the
// fleet's shared tier instead of being lost. With remote.write_through, blocks committed into the
// host tier are copied there too, by the mover, as soon as it gets to them (WriteThroughToRemote).
//
// Why the mover and not the eviction itself: a drop may happen on any thread that evicts (a put's,
// in the drop paths), and a publish waits for the network. Only EvictToTarget and MakeRoom, which
// the mover calls, publish; a drop elsewhere (a put taking room itself when the mover lags, with
// placement.when_disk_lags: drop) loses the block as it would without a remote tier.
#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <vector>

#include "daemon/store/store.h"
#include "tiers/remote/remote_record.h"

namespace kvtier::store {

using index::BlockMeta;
using index::BlockState;
namespace remote = tiers::remote;

namespace {

// Victims publishing one MakeRoom may go through before it falls back to dropping unpublished
// (which always makes room when anything can go): bounds a put's wait when the victims the mover
// finds are all of other sizes than the one the put needs.
constexpr int kPublishRounds = 8;
constexpr size_t kPublishBatch = 8;
// Blocks one reader's prefix may ask the remote tier for ahead of reading them: with 2 MiB
// blocks, 128 MiB in the host tier for a prefix the reader may abandon at its first miss.
constexpr size_t kMaxRemotePrefetch = 64;
// How often a fetch that found the host tier full looks again while other mover threads publish
// the victims that make its room.
constexpr std::chrono::milliseconds kRoomPoll{1};

// One block being published: pinned, with its record header and where its payload is.
struct Outgoing {
  BlockKey key;
  BlockMeta meta;
  std::array<std::byte, remote::kRecordHeaderBytes> header{};
  std::vector<std::byte> copy;  // the payload, for a tier that is not plain memory (NVMe)
  std::span<const std::byte> payload;
  Status status;
};

}  // namespace

bool Store::HostHasTierBelow() const {
  const size_t host = LevelOf(TierId::kHost);
  return host < tiers_.size() && (host + 1 < tiers_.size() || options_.remote.store != nullptr);
}

bool Store::PublishesDrops(size_t level) const {
  return options_.remote.store != nullptr && level + 1 == tiers_.size();
}

uint32_t Store::RemoteClockSeconds() const {
  return static_cast<uint32_t>(clock_.NowMicros() / 1'000'000) + 1;
}

bool Store::RemoteCopyIsFresh(const BlockMeta& meta) const {
  if (meta.remote_copy_s == 0) return false;
  const auto half_ttl_s =
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::seconds>(options_.remote.ttl).count()) /
      2;
  return RemoteClockSeconds() - meta.remote_copy_s < half_ttl_s;
}

std::vector<BlockKey> Store::PublishToRemote(size_t level,
                                             std::span<const std::pair<BlockKey, BlockMeta>> blocks,
                                             RemotePin pin) {
  tiers::Tier& t = *tiers_[level];
  std::vector<BlockKey> unpinned;
  std::vector<Outgoing> out;
  out.reserve(blocks.size());  // no reallocation: the writes below borrow the headers
  std::vector<tiers::BlockRead> reads;
  const std::vector<bool> in_cluster = StillInCluster(blocks, pin);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto& [key, meta] = blocks[b];
    if (in_cluster[b]) {
      counters_.remote_publishes_saved.fetch_add(1);
      continue;
    }
    if (namespaces_.NodeLocal(meta.ns)) continue;  // dropped unpublished: it stays on the node
    // Pinned while its bytes are read and sent: nobody frees or reuses the extent meanwhile. A
    // victim leased or changed is not dropped either; a write-through's block that changed is
    // not the one committed.
    const bool pinned =
        pin == RemotePin::kExclusive ? PinForMove(key, meta) : PinAsReader(key, meta);
    if (!pinned) {
      unpinned.push_back(key);
      continue;
    }
    Outgoing& o = out.emplace_back(Outgoing{key, meta, {}, {}, {}, {}});
    if (const std::byte* address = t.Address(meta.extent)) {
      o.payload = {address, meta.extent.length};
    } else {
      o.copy.resize(meta.extent.length);
      reads.push_back({meta.extent, {meta.ns, key}, o.copy, {}});
    }
  }
  // Blocks on a device are read as one batch, which also verifies their checksums.
  t.ReadBlocks(reads);
  for (size_t i = 0, r = 0; i < out.size(); ++i) {
    if (out[i].copy.empty()) continue;
    out[i].status = reads[r++].status;
    out[i].payload = out[i].copy;
  }
  std::vector<remote::RemoteWrite> writes;
  std::vector<size_t> sent;
  for (size_t i = 0; i < out.size(); ++i) {
    Outgoing& o = out[i];
    if (!o.status.ok()) continue;
    o.header = remote::EncodeRecordHeader(o.meta.ns, o.key, o.payload);
    const std::string_view header(reinterpret_cast<const char*>(o.header.data()), o.header.size());
    const std::string_view payload(reinterpret_cast<const char*>(o.payload.data()),
                                   o.payload.size());
    writes.push_back({remote::RemoteKey(o.meta.ns, o.key), {header, payload}});
    sent.push_back(i);
  }
  if (!writes.empty()) {
    std::vector<Status> written =
        options_.remote.store->Set(std::move(writes), options_.remote.ttl, options_.remote.timeout);
    for (size_t j = 0; j < sent.size(); ++j) out[sent[j]].status = written[j];
  }
  const uint32_t now_s = RemoteClockSeconds();
  for (const Outgoing& o : out) {
    if (pin == RemotePin::kShared && o.status.ok()) {
      // Before the reader's pin goes: the block is still this incarnation.
      (void)index_->Update(o.key, [&](BlockMeta& m) {
        if (m.generation == o.meta.generation) m.remote_copy_s = now_s;
        return Status::Ok();
      });
    }
    UnpinAfterMove(o.key);
    if (o.status.ok()) {
      counters_.remote_publishes.fetch_add(1);
      counters_.remote_publish_bytes.fetch_add(o.payload.size());
    } else {
      counters_.remote_publish_errors.fetch_add(1);
    }
  }
  return unpinned;
}

std::vector<bool> Store::StillInCluster(std::span<const std::pair<BlockKey, BlockMeta>> blocks,
                                        RemotePin pin) {
  std::vector<bool> in_cluster(blocks.size(), false);
  if (pin != RemotePin::kExclusive) return in_cluster;
  // A victim written through less than half the TTL ago has at least the other half left in the
  // cluster, unless the cluster lost it (evicted under maxmemory, a failover that lost writes):
  // one EXISTS batch, no payload, tells which copies are still there. Any answer other than OK
  // (gone, an error, a timeout) publishes the block. (Later, the drop's copy renews its TTL.)
  std::vector<size_t> asked;
  std::vector<std::string> keys;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (!RemoteCopyIsFresh(blocks[b].second)) continue;
    asked.push_back(b);
    keys.push_back(remote::RemoteKey(blocks[b].second.ns, blocks[b].first));
  }
  if (keys.empty()) return in_cluster;
  const std::vector<Status> found =
      options_.remote.store->Exists(std::move(keys), options_.remote.timeout);
  for (size_t j = 0; j < asked.size(); ++j) in_cluster[asked[j]] = found[j].ok();
  return in_cluster;
}

bool Store::PinAsReader(const BlockKey& key, const BlockMeta& meta) {
  return index_
      ->Update(key,
               [&](BlockMeta& m) {
                 if (m.generation != meta.generation || m.state != BlockState::kReady ||
                     m.tier != meta.tier || m.extent != meta.extent) {
                   return NotFound("block changed since it was committed");
                 }
                 ++m.lease_count;
                 return Status::Ok();
               })
      .ok();
}

void Store::WriteThroughToRemote(std::span<const WriteThroughRequest> requests) {
  const size_t host = LevelOf(TierId::kHost);
  if (options_.remote.store == nullptr || host >= tiers_.size()) return;
  std::vector<std::pair<BlockKey, BlockMeta>> blocks;
  for (const WriteThroughRequest& r : requests) {
    std::optional<BlockMeta> meta = index_->Get(r.key);
    // Gone or replaced: nothing to copy. Moved below the host tier already: it is published
    // when it leaves the node.
    if (!meta || meta->generation != r.generation || meta->state != BlockState::kReady ||
        meta->tier != TierId::kHost) {
      continue;
    }
    blocks.emplace_back(r.key, *meta);
  }
  if (!blocks.empty()) (void)PublishToRemote(host, blocks, RemotePin::kShared);
}

bool Store::PublishesDropsOf(TierId id) const {
  const size_t level = LevelOf(id);
  return level < tiers_.size() && PublishesDrops(level);
}

void Store::MakeRoomBelowByPublishing(size_t level,
                                      std::span<const std::pair<BlockKey, BlockMeta>> victims) {
  uint64_t needed = 0;
  for (const auto& [key, meta] : victims) {
    if (!HasCopyBelow(level, meta)) needed += meta.extent.length;
  }
  tiers::Tier& below = *tiers_[level + 1];
  const tiers::TierStats stats = below.Stats();
  const uint64_t free = stats.free_bytes();
  if (needed <= free) return;
  const uint64_t target = stats.used_bytes - std::min(stats.used_bytes, needed - free);
  (void)EvictToTarget(below.id(), target, std::max<size_t>(victims.size(), kPublishBatch));
}

bool Store::MakeRoomByPublishing(uint64_t bytes) {
  tiers::Tier& t = *tiers_[put_level_];
  for (int round = 0; round < kPublishRounds; ++round) {
    Result<Extent> extent = t.Allocate(bytes);
    if (extent.ok()) {
      t.Free(*extent);
      move_requests_.NotifyMoved();
      return true;
    }
    if (extent.status().code() != StatusCode::kBusy) return false;
    const uint64_t used = t.Stats().used_bytes;
    if (EvictToTarget(t.id(), used > bytes ? used - bytes : 0, kPublishBatch) > 0) continue;
    // Nothing picked. When other mover threads are publishing victims of this tier, the room is
    // on its way (the put hears of it when they finish); dropping more here, unpublished, would
    // lose blocks only because the network is slower than the puts.
    if (evicting_bytes_[static_cast<size_t>(t.id())].load(std::memory_order_relaxed) > 0) {
      return false;
    }
    break;
  }
  // What is left (nothing evictable by LRU, or space held by slabs of other sizes): the eviction
  // of a put without a mover, whose drops are not published.
  Result<Extent> extent = AllocateWithEviction(put_level_, bytes);
  if (!extent.ok()) return false;
  t.Free(*extent);
  move_requests_.NotifyMoved();
  return true;
}

std::vector<std::pair<NamespaceId, BlockKey>> Store::TakeRemoteFetchRequests(size_t max,
                                                                             uint64_t max_bytes) {
  uint64_t expired = 0;
  const auto asked_since = std::chrono::steady_clock::now() - options_.reader_wait;
  std::vector<std::pair<NamespaceId, BlockKey>> taken =
      move_requests_.TakeRemoteFetches(1, asked_since, &expired);
  const auto count_expired = [&] {
    if (expired > 0) counters_.remote_fetches_expired.fetch_add(expired);
  };
  if (taken.empty() || max <= 1) {
    count_expired();
    return taken;
  }
  // The blocks of one batch are usually of one namespace: its block size sets the count.
  std::optional<NamespaceRegistry::Entry> entry = namespaces_.Find(taken.front().first);
  const uint64_t block_bytes = entry && entry->block_bytes > 0 ? entry->block_bytes : 1;
  const size_t more = std::min<uint64_t>(max, std::max<uint64_t>(1, max_bytes / block_bytes)) - 1;
  if (more > 0) {
    for (auto& request : move_requests_.TakeRemoteFetches(more, asked_since, &expired)) {
      taken.push_back(request);
    }
  }
  count_expired();
  return taken;
}

Status Store::FetchRemoteForRead(const NamespaceId& ns, const BlockKey& key) {
  if (options_.remote.store == nullptr || !options_.background_disk_moves) return Status::Ok();
  // Not registered, or kept on this node: a plain miss.
  if (namespaces_.Counters(ns) == nullptr || namespaces_.NodeLocal(ns)) return Status::Ok();
  // The mover tried and found nothing (or could not bring it): this read misses.
  if (move_requests_.TakeFailedFetch(key, FailuresSince())) return Status::Ok();
  switch (move_requests_.AskForRemoteFetch(ns, key)) {
    case MoveRequests::RemoteAsk::kQueueFull:
      return Status::Ok();  // the remote tier is behind: a miss, not a wait
    case MoveRequests::RemoteAsk::kQueued:
      if (wake_mover_) wake_mover_();
      break;
    case MoveRequests::RemoteAsk::kAlreadyAsked:
      break;
  }
  return Pending("block is being fetched from the remote tier");
}

bool Store::PrefetchRemote(const NamespaceId& ns, std::span<const BlockKey> keys) {
  if (options_.remote.store == nullptr || namespaces_.Counters(ns) == nullptr ||
      namespaces_.NodeLocal(ns)) {
    return false;
  }
  bool asked = false;
  for (const BlockKey& key : keys.first(std::min(keys.size(), kMaxRemotePrefetch))) {
    // A key the index knows (being written, of another namespace) ends what a reader could use.
    if (index_->Get(key)) break;
    const MoveRequests::RemoteAsk ask = move_requests_.AskForRemoteFetch(ns, key);
    if (ask == MoveRequests::RemoteAsk::kQueueFull) break;
    asked |= ask == MoveRequests::RemoteAsk::kQueued;
  }
  return asked;
}

void Store::FetchRemote(std::span<const std::pair<NamespaceId, BlockKey>> blocks) {
  if (blocks.empty()) return;
  if (options_.remote.store == nullptr) {
    for (const auto& [ns, key] : blocks) move_requests_.FinishFetch(key, false);
    return;
  }
  std::vector<std::string> keys;
  keys.reserve(blocks.size());
  for (const auto& [ns, key] : blocks) keys.push_back(remote::RemoteKey(ns, key));
  std::vector<Result<std::string>> values =
      options_.remote.store->Get(std::move(keys), options_.remote.timeout);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& [ns, key] = blocks[i];
    bool stored = false;
    if (!values[i].ok()) {
      (values[i].status().code() == StatusCode::kNotFound ? counters_.remote_fetch_misses
                                                          : counters_.remote_fetch_errors)
          .fetch_add(1);
    } else if (Result<remote::RecordView> record = remote::DecodeRecord(*values[i], ns, key);
               !record.ok()) {
      // Damaged, foreign, or another block's record: never bytes. It is left to expire (another
      // node may publish the block again over it).
      counters_.remote_fetch_corrupt.fetch_add(1);
    } else {
      Status st = StoreFetched(ns, key, record->payload, record->header.payload_checksum);
      stored = st.ok() || st.code() == StatusCode::kAlreadyExists;
      if (st.ok()) {
        counters_.remote_fetches.fetch_add(1);
        counters_.remote_fetch_bytes.fetch_add(record->payload.size());
      } else if (!stored) {
        counters_.remote_fetch_errors.fetch_add(1);
      }
    }
    move_requests_.FinishFetch(key, stored);
  }
}

Status Store::StoreFetched(const NamespaceId& ns, const BlockKey& key,
                           std::span<const std::byte> payload, uint64_t checksum) {
  Result<Reservation> r = BeginPut(ns, key, payload.size());
  // The host tier is full: this is the mover, which makes room itself rather than wait for itself.
  // When other mover threads are publishing victims, the room is on its way: wait for it, up to
  // the remote tier's own timeout (the reader that asked waits without holding a thread), rather
  // than lose a block that a lookup has just promised.
  const auto deadline = std::chrono::steady_clock::now() + options_.remote.timeout;
  const std::atomic<uint64_t>& evicting =
      evicting_bytes_[static_cast<size_t>(tiers_[put_level_]->id())];
  while (r.status().code() == StatusCode::kPending && std::chrono::steady_clock::now() < deadline) {
    if (!MakeRoom(payload.size())) {
      if (evicting.load(std::memory_order_relaxed) == 0) break;
      std::this_thread::sleep_for(kRoomPoll);
    }
    r = BeginPut(ns, key, payload.size());
  }
  if (!r.ok()) return r.status();
  return FillAndCommit(*r, payload, checksum);
}

bool Store::StartRemoteLookup(const NamespaceId& ns, std::vector<BlockKey> keys,
                              std::function<void(size_t found)> done) {
  if (options_.remote.store == nullptr || namespaces_.NodeLocal(ns)) return false;
  std::vector<std::string> remote_keys;
  remote_keys.reserve(keys.size());
  for (const BlockKey& key : keys) remote_keys.push_back(remote::RemoteKey(ns, key));
  options_.remote.store->StartExists(std::move(remote_keys), options_.remote.lookup_timeout,
                                     [this, done = std::move(done)](std::vector<Status> answers) {
                                       size_t found = 0;
                                       while (found < answers.size() && answers[found].ok())
                                         ++found;
                                       done(found);
                                       // The request that asked waits as it waits for the mover:
                                       // wake it.
                                       move_requests_.NotifyMoved();
                                     });
  return true;
}

}  // namespace kvtier::store

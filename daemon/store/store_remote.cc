// The store's side of the remote tier (docs/scale-out.md): the blocks the mover drops from the
// last local tier are written to the remote store first (PublishToRemote), and room for a put is
// made through that same path (MakeRoomByPublishing), so that a block leaves the node for the
// fleet's shared tier instead of being lost.
//
// Why the mover and not the eviction itself: a drop may happen on any thread that evicts (a put's,
// in the drop paths), and a publish waits for the network. Only EvictToTarget and MakeRoom, which
// the mover calls, publish; a drop elsewhere (a put taking room itself when the mover lags, with
// placement.when_disk_lags: drop) loses the block as it would without a remote tier.
#include <array>
#include <vector>

#include "daemon/store/store.h"
#include "tiers/remote/remote_record.h"

namespace kvtier::store {

using index::BlockMeta;
namespace remote = tiers::remote;

namespace {

// Victims publishing one MakeRoom may go through before it falls back to dropping unpublished
// (which always makes room when anything can go): bounds a put's wait when the victims the mover
// finds are all of other sizes than the one the put needs.
constexpr int kPublishRounds = 8;
constexpr size_t kPublishBatch = 8;

// One victim being published: pinned, with its record header and where its payload is.
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

void Store::PublishToRemote(size_t level, std::span<const std::pair<BlockKey, BlockMeta>> victims) {
  tiers::Tier& t = *tiers_[level];
  std::vector<Outgoing> out;
  out.reserve(victims.size());  // no reallocation: the writes below borrow the headers
  std::vector<tiers::BlockRead> reads;
  for (const auto& [key, meta] : victims) {
    // Pinned while its bytes are read and sent: nobody frees or reuses the extent meanwhile.
    if (!PinForMove(key, meta)) continue;  // leased or changed: it is not dropped either
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
  for (const Outgoing& o : out) {
    UnpinAfterMove(o.key);
    if (o.status.ok()) {
      counters_.remote_publishes.fetch_add(1);
      counters_.remote_publish_bytes.fetch_add(o.payload.size());
    } else {
      counters_.remote_publish_errors.fetch_add(1);
    }
  }
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
    if (EvictToTarget(t.id(), used > bytes ? used - bytes : 0, kPublishBatch) == 0) break;
  }
  // What is left (nothing evictable by LRU, or space held by slabs of other sizes): the eviction
  // of a put without a mover, whose drops are not published.
  Result<Extent> extent = AllocateWithEviction(put_level_, bytes);
  if (!extent.ok()) return false;
  t.Free(*extent);
  move_requests_.NotifyMoved();
  return true;
}

}  // namespace kvtier::store

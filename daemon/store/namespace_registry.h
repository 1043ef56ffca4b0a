// NamespaceRegistry: the namespaces the store serves (what a block size and token count mean in
// each) and their counters.
//
// Counters are created at the first registration and kept after a drop (a dropped namespace's
// late releases and lookups must never touch freed memory, and /metrics keeps its totals); they
// are few, one per namespace ever registered. A namespace dropped while blocks found on disk at
// start-up are still being adopted is remembered, so that its blocks do not come back.
//
// Thread safety: every method may be called from any thread; one lock, held for a map lookup.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/keys.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/store/store_stats.h"

namespace kvtier::store {

struct NamespaceInfo {
  NamespaceId id;
  uint32_t tokens_per_block = 0;  // for hit-token counts; 0 when not a token namespace
  uint64_t block_bytes = 0;       // every block of the namespace has this size; 0: any size
  std::string label;              // for humans: "meta-llama/Llama-3.1-8B bf16 tp0/1"
  // The descriptor the id was computed from, as KVT.REGISTER names its fields ("model", "layout",
  // "salt", ...), every field in that command's order; empty when registered without one. Lets
  // KVT.EXPLAIN find a namespace that differs from another in one field. Never sent to clients
  // as a whole: it holds the tenant salt.
  std::vector<std::pair<std::string, std::string>> fields;
  // The quota group its blocks count in (quota_table.h; 0: none). Set by the store.
  uint8_t quota_group = 0;
  // Its blocks stay on this node: never published to the remote tier nor fetched from it. The
  // generic (Redis-style) key space is: its names are whatever this node's clients chose, and
  // its id is the same on every node, so a fleet would share (and serve) each other's values.
  bool node_local = false;

  // The tenant salt among `fields` ("" when none): the field that names a tenant.
  std::string_view TenantSalt() const {
    for (const auto& [field, value] : fields) {
      if (field == kTenantSaltField) return value;
    }
    return {};
  }
  static constexpr std::string_view kTenantSaltField = "salt";
};

class NamespaceRegistry {
 public:
  // What a lookup or a put needs of a registered namespace, found with one map lookup: its block
  // shape and its counters (which live as long as the registry). No label: copying that string on
  // every command would allocate on the request path.
  struct Entry {
    uint32_t tokens_per_block = 0;
    uint64_t block_bytes = 0;
    NamespaceCounters* counters = nullptr;
    uint8_t quota_group = 0;
  };

  // Idempotent for identical parameters. kInvalidArgument when the id is known with another block
  // size or tokens per block.
  Status Register(const NamespaceInfo& info);
  // nullopt when not registered (never, or dropped).
  std::optional<Entry> Find(const NamespaceId& ns) const;
  std::optional<NamespaceInfo> Get(const NamespaceId& ns) const;
  // kNotFound when not registered.
  Status SetQuotaGroup(const NamespaceId& ns, uint8_t group);
  bool Registered(const NamespaceId& ns) const;
  // The counters of a namespace ever registered, dropped ones included; nullptr otherwise.
  NamespaceCounters* Counters(const NamespaceId& ns) const;
  std::vector<NamespaceInfo> List() const;
  // Forgets `ns`. `refuse_adoption`: blocks of it found on disk and adopted after this are
  // refused (AdoptionRefused). `generation_watermark`: the store's next generation at the drop,
  // above every block of `ns` there was then (see Holds). kNotFound when not registered.
  Status Drop(const NamespaceId& ns, bool refuse_adoption, uint64_t generation_watermark);
  bool AdoptionRefused(const NamespaceId& ns) const;
  // Whether a block of `ns` of generation `generation` belongs to the namespace as it is now:
  // `ns` is registered and was not dropped after the block was made. A block a drop skipped (a
  // leased one, one being written or moved) must go even when the namespace was registered
  // again before its lease or move ended: a drop invalidates what it finds.
  bool Holds(const NamespaceId& ns, uint64_t generation) const;
  // Whether `ns` was dropped after the block of generation `generation` was made (registered
  // again since or not).
  bool DroppedSince(const NamespaceId& ns, uint64_t generation) const;
  // Whether `ns` was ever registered as node_local (kept after a drop).
  bool NodeLocal(const NamespaceId& ns) const;
  // Calls `visit` for every namespace ever registered, with its info when registered now.
  void ForEach(const std::function<void(const NamespaceId&, const NamespaceInfo*,
                                        const NamespaceCounters&)>& visit) const;

 private:
  mutable Mutex mu_;
  std::unordered_map<NamespaceId, NamespaceInfo, Key128Hash> namespaces_ GUARDED_BY(mu_);
  std::unordered_map<NamespaceId, std::unique_ptr<NamespaceCounters>, Key128Hash> counters_
      GUARDED_BY(mu_);
  // Few: drops are rare, and adoption is short.
  std::unordered_set<NamespaceId, Key128Hash> refused_adoption_ GUARDED_BY(mu_);
  std::unordered_set<NamespaceId, Key128Hash> node_local_ GUARDED_BY(mu_);
  // The generation watermark of each namespace's last drop (one entry per namespace ever
  // dropped: few).
  std::unordered_map<NamespaceId, uint64_t, Key128Hash> dropped_at_ GUARDED_BY(mu_);
};

}  // namespace kvtier::store

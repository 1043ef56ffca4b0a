#include "daemon/store/namespace_registry.h"

namespace kvtier::store {

Status NamespaceRegistry::Register(const NamespaceInfo& info) {
  MutexLock lock(mu_);
  auto [it, inserted] = namespaces_.try_emplace(info.id, info);
  if (!inserted && (it->second.block_bytes != info.block_bytes ||
                    it->second.tokens_per_block != info.tokens_per_block)) {
    return InvalidArgument("namespace " + info.id.ToHex() +
                           " is already registered with another block size or tokens per block");
  }
  std::unique_ptr<NamespaceCounters>& counters = counters_[info.id];
  if (!counters) counters = std::make_unique<NamespaceCounters>();
  if (info.node_local) node_local_.insert(info.id);
  return Status::Ok();
}

bool NamespaceRegistry::NodeLocal(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  return node_local_.contains(ns);
}

std::optional<NamespaceRegistry::Entry> NamespaceRegistry::Find(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return std::nullopt;
  return Entry{it->second.tokens_per_block, it->second.block_bytes, counters_.at(ns).get(),
               it->second.quota_group};
}

Status NamespaceRegistry::SetQuotaGroup(const NamespaceId& ns, uint8_t group) {
  MutexLock lock(mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return NotFound("namespace " + ns.ToHex() + " is not registered");
  it->second.quota_group = group;
  return Status::Ok();
}

std::optional<NamespaceInfo> NamespaceRegistry::Get(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return std::nullopt;
  return it->second;
}

bool NamespaceRegistry::Registered(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  return namespaces_.contains(ns);
}

NamespaceCounters* NamespaceRegistry::Counters(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  auto it = counters_.find(ns);
  return it == counters_.end() ? nullptr : it->second.get();
}

std::vector<NamespaceInfo> NamespaceRegistry::List() const {
  MutexLock lock(mu_);
  std::vector<NamespaceInfo> out;
  out.reserve(namespaces_.size());
  for (const auto& [id, info] : namespaces_) out.push_back(info);
  return out;
}

Status NamespaceRegistry::Drop(const NamespaceId& ns, bool refuse_adoption,
                               uint64_t generation_watermark) {
  MutexLock lock(mu_);
  if (namespaces_.erase(ns) == 0) return NotFound("namespace " + ns.ToHex() + " is not registered");
  if (refuse_adoption) refused_adoption_.insert(ns);
  dropped_at_[ns] = generation_watermark;
  return Status::Ok();
}

bool NamespaceRegistry::Holds(const NamespaceId& ns, uint64_t generation) const {
  MutexLock lock(mu_);
  if (!namespaces_.contains(ns)) return false;
  const auto dropped = dropped_at_.find(ns);
  return dropped == dropped_at_.end() || generation >= dropped->second;
}

bool NamespaceRegistry::DroppedSince(const NamespaceId& ns, uint64_t generation) const {
  MutexLock lock(mu_);
  const auto dropped = dropped_at_.find(ns);
  return dropped != dropped_at_.end() && generation < dropped->second;
}

bool NamespaceRegistry::AdoptionRefused(const NamespaceId& ns) const {
  MutexLock lock(mu_);
  return refused_adoption_.contains(ns);
}

void NamespaceRegistry::ForEach(const std::function<void(const NamespaceId&, const NamespaceInfo*,
                                                         const NamespaceCounters&)>& visit) const {
  MutexLock lock(mu_);
  for (const auto& [id, counters] : counters_) {
    auto info = namespaces_.find(id);
    visit(id, info == namespaces_.end() ? nullptr : &info->second, *counters);
  }
}

}  // namespace kvtier::store

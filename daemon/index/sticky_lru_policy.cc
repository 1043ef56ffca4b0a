#include "daemon/index/sticky_lru_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/clock.h"

namespace kvtier::index {
namespace {

constexpr size_t kGapsPerEstimate = 64;  // re-estimate G after this many new gaps

}  // namespace

uint64_t StickyLruPolicy::SteadyMillis() { return SteadyClock::Instance().NowMillisCoarse(); }

Result<StickyLruPolicy::Params> StickyLruPolicy::ParseParams(std::string_view spec) {
  Params p;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string name(item.substr(0, eq));
    const std::string text(eq == std::string_view::npos ? "" : item.substr(eq + 1));
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) {
      return InvalidArgument("sticky parameter '" + std::string(item) + "': expected name=number");
    }
    const auto bad = [&](const char* why) {
      return InvalidArgument("sticky parameter '" + std::string(item) + "': " + why);
    };
    if (name == "sample") {
      // In range before the cast: a double outside uint64_t's range does not convert.
      if (value < 1 || value > 1024 || value != std::floor(value)) {
        return bad("a power of 2 from 1 to 1024");
      }
      const auto n = static_cast<uint64_t>(value);
      if ((n & (n - 1)) != 0) return bad("a power of 2 from 1 to 1024");
      p.sample_one_in = n;
    } else if (name == "window") {
      if (value < 1 || value > 1 << 20 || value != std::floor(value)) {
        return bad("a whole number from 1 to 1048576");
      }
      p.gap_window = static_cast<size_t>(value);
    } else if (name == "quantile") {
      if (value < 0 || value >= 1) return bad("in [0, 1)");
      p.gap_quantile = value;
    } else if (name == "memory") {
      if (value <= 0) return bad("above 0");
      p.duel_memory_gaps = value;
    } else if (name == "margin") {
      if (value < 0) return bad("at least 0");
      p.duel_margin_sigmas = value;
    } else if (name == "ghost") {
      if (value < 0) return bad("at least 0");
      p.ghost_factor = value;
    } else {
      return InvalidArgument("unknown sticky parameter '" + name +
                             "' (known: sample, window, quantile, memory, margin, ghost)");
    }
  }
  return p;
}

StickyLruPolicy::StickyLruPolicy(size_t capacity_hint_blocks, Clock now_ms)
    : StickyLruPolicy(capacity_hint_blocks, std::move(now_ms), Params{}) {}

StickyLruPolicy::StickyLruPolicy(size_t capacity_hint_blocks, Clock now_ms, const Params& params)
    : now_ms_(std::move(now_ms)),
      params_(params),
      capacity_hint_(capacity_hint_blocks),
      gaps_(params.gap_window) {
  sticky_shadow_.sticky = true;
}

bool StickyLruPolicy::Sampled(const BlockKey& key) const {
  // Keys are uniform hashes; the high half's top bits are independent of the index's shard choice.
  // Rotated to the bottom, so that 1 in 16 is the top four bits being zero. sample_one_in is a
  // power of 2: a mask, not a division, on every touch.
  return (std::rotl(key.high, 4) & (params_.sample_one_in - 1)) == 0;
}

size_t StickyLruPolicy::Capacity() const { return std::max(capacity_hint_, peak_size_); }

void StickyLruPolicy::Stamp(Lists::Node node, uint64_t now) {
  if (node >= stamps_.size()) stamps_.resize(node + 1);
  stamps_[node] = now;
}

bool StickyLruPolicy::Contains(const BlockKey& key) const {
  const Lists::Node node = lists_.Find(key);
  return node != Lists::kNone && lists_.SegmentOf(node) == kResident;
}

bool StickyLruPolicy::protecting() const {
  // Won by more than chance: hits are counts, so two standard deviations of their sum's noise.
  const double margin =
      params_.duel_margin_sigmas * std::sqrt(sticky_shadow_.score + lru_shadow_.score);
  return sticky_shadow_.score > lru_shadow_.score + margin;
}

std::optional<uint64_t> StickyLruPolicy::reuse_gap_ms() const {
  if (gap_estimate_ == UINT64_MAX) return std::nullopt;
  return gap_estimate_;
}

void StickyLruPolicy::RecordGap(uint64_t gap_ms) {
  gaps_.Add(static_cast<uint32_t>(std::min<uint64_t>(gap_ms, UINT32_MAX)));
  if (++gaps_since_estimate_ < kGapsPerEstimate) return;
  gaps_since_estimate_ = 0;
  gap_estimate_ = gaps_.Quantile(params_.gap_quantile);
}

void StickyLruPolicy::RememberInGhost(const BlockKey& key, uint64_t stamp) {
  if (!Sampled(key)) return;
  Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone) node = lists_.Add(key, kGhost);
  lists_.MoveToHead(node, kGhost);
  Stamp(node, stamp);
  const auto ghost_limit = std::max<size_t>(
      16, static_cast<size_t>(params_.ghost_factor *
                              static_cast<double>(Capacity() / params_.sample_one_in)));
  while (lists_.Size(kGhost) > ghost_limit) lists_.Remove(lists_.Tail(kGhost));
}

void StickyLruPolicy::Observe(const BlockKey& key, Lists::Node node, uint64_t now) {
  if (!Sampled(key)) return;
  if (node != Lists::kNone) RecordGap(now - std::min(now, stamps_[node]));
  Replay(lru_shadow_, key, now);
  Replay(sticky_shadow_, key, now);
}

void StickyLruPolicy::Replay(Shadow& shadow, const BlockKey& key, uint64_t now) {
  using ShadowLists = SegmentedLists<1>;
  // Hits count less the older they are: by e^-1 every duel_memory_gaps reuse gaps (G), so the
  // duel follows the workload at its own pace, whatever its request rate.
  // Uses in the same millisecond (a lookup's keys) fade nothing: no exp() for them.
  if (gap_estimate_ != UINT64_MAX && now > shadow.last_replay) {
    const auto elapsed = static_cast<double>(now - shadow.last_replay);
    const double window =
        params_.duel_memory_gaps * static_cast<double>(std::max<uint64_t>(1, gap_estimate_));
    shadow.score *= std::exp(-elapsed / window);
  }
  shadow.last_replay = now;
  const auto stamp = [&](ShadowLists::Node node) {
    if (node >= shadow.stamps.size()) shadow.stamps.resize(node + 1);
    shadow.stamps[node] = now;
  };
  if (const ShadowLists::Node node = shadow.keys.Find(key); node != ShadowLists::kNone) {
    // A second use in the same millisecond is the same use (a refused put after its insert).
    if (shadow.stamps[node] == now) return;
    shadow.score += 1;
    shadow.keys.MoveToHead(node, 0);
    stamp(node);
    return;
  }
  const size_t capacity = std::max<size_t>(1, Capacity() / params_.sample_one_in);
  if (shadow.keys.Size(0) >= capacity) {
    const ShadowLists::Node tail = shadow.keys.Tail(0);
    if (shadow.sticky && Young(shadow.stamps[tail], now)) return;
    shadow.keys.Remove(tail);
  }
  stamp(shadow.keys.Add(key, 0));
}

void StickyLruPolicy::Insert(const BlockKey& key) { Track(key, /*observe=*/true); }

void StickyLruPolicy::PutBack(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node != Lists::kNone && lists_.SegmentOf(node) == kResident) return;
  Track(key, /*observe=*/false);
}

void StickyLruPolicy::Track(const BlockKey& key, bool observe) {
  const uint64_t now = now_ms_();
  Lists::Node node = lists_.Find(key);
  if (node != Lists::kNone && lists_.SegmentOf(node) == kResident) {  // broken contract: a touch
    lists_.MoveToHead(node, kResident);
    Stamp(node, now);
    return;
  }
  if (observe) Observe(key, node, now);
  if (node == Lists::kNone) {
    node = lists_.Add(key, kResident);
  } else {
    lists_.MoveToHead(node, kResident);
  }
  Stamp(node, now);
  peak_size_ = std::max(peak_size_, lists_.Size(kResident));
}

void StickyLruPolicy::Touch(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone || lists_.SegmentOf(node) != kResident) return;
  Use(node, key, now_ms_());
}

void StickyLruPolicy::TouchRun(std::span<const BlockKey> run) {
  if (run.empty()) return;
  const uint64_t now = now_ms_();
  // Use() of each resident, deepest first, with the moves made together at the end: a move
  // changes nothing that Observe or Stamp reads.
  lists_.FindRun(run, kResident, run_nodes_);
  for (size_t i = run.size(); i-- > 0;) {
    const Lists::Node node = run_nodes_[i];
    if (node == Lists::kNone) continue;
    Observe(run[i], node, now);
    Stamp(node, now);
  }
  lists_.MoveRunToHead(run_nodes_, kResident);
}

void StickyLruPolicy::Use(Lists::Node node, const BlockKey& key, uint64_t now) {
  Observe(key, node, now);
  lists_.MoveToHead(node, kResident);
  Stamp(node, now);
}

void StickyLruPolicy::Refresh(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone || lists_.SegmentOf(node) != kResident) return;
  lists_.MoveToHead(node, kResident);
}

void StickyLruPolicy::Erase(const BlockKey& key) {
  // A ghost key stays: the store erases each victim after PopVictim made it one.
  const Lists::Node node = lists_.Find(key);
  if (node == Lists::kNone || lists_.SegmentOf(node) != kResident) return;
  lists_.Remove(node);
  // A resident taken out (moved to another tier, or removed): the shadows forget it too, or its
  // return (a block read up and later demoted again) would count as a hit in them that no cache
  // had.
  if (!Sampled(key)) return;
  for (Shadow* shadow : {&lru_shadow_, &sticky_shadow_}) {
    if (const auto shadow_node = shadow->keys.Find(key); shadow_node != SegmentedLists<1>::kNone) {
      shadow->keys.Remove(shadow_node);
    }
  }
}

std::optional<BlockKey> StickyLruPolicy::PopVictim() {
  const Lists::Node tail = lists_.Tail(kResident);
  if (tail == Lists::kNone) return std::nullopt;
  const BlockKey victim = lists_.KeyOf(tail);
  const uint64_t stamp = stamps_[tail];
  lists_.Remove(tail);
  RememberInGhost(victim, stamp);
  return victim;
}

bool StickyLruPolicy::AdmitsNew() {
  if (!protecting()) return true;
  const Lists::Node tail = lists_.Tail(kResident);
  if (tail == Lists::kNone) return true;
  return !Young(stamps_[tail], now_ms_());
}

bool StickyLruPolicy::Young(uint64_t last_use, uint64_t now) const {
  // Until enough gaps were measured nothing counts as young: the policy is LRU then.
  return gap_estimate_ != UINT64_MAX && now - std::min(now, last_use) < gap_estimate_;
}

void StickyLruPolicy::NotAdmitted(const BlockKey& key) {
  const Lists::Node node = lists_.Find(key);
  if (node != Lists::kNone && lists_.SegmentOf(node) == kResident) return;
  const uint64_t now = now_ms_();
  Observe(key, node, now);
  RememberInGhost(key, now);
}

}  // namespace kvtier::index

#include "daemon/server/generic_keys.h"

#include <chrono>

namespace kvtier::server {

GenericKeys::Entry* GenericKeys::Find(Stripe& stripe, const BlockKey& key) {
  auto it = stripe.entries.find(key);
  return it == stripe.entries.end() ? nullptr : &it->second;
}

void GenericKeys::Record(Stripe& stripe, const BlockKey& key, std::string_view name,
                         uint64_t expires_at_ms) {
  auto [it, inserted] = stripe.entries.try_emplace(key);
  if (inserted) size_.fetch_add(1, std::memory_order_relaxed);
  name_bytes_.fetch_add(name.size(), std::memory_order_relaxed);
  name_bytes_.fetch_sub(it->second.name.size(), std::memory_order_relaxed);
  it->second.name.assign(name);
  it->second.expires_at_ms = expires_at_ms;
}

bool GenericKeys::Forget(Stripe& stripe, const BlockKey& key) {
  auto it = stripe.entries.find(key);
  if (it == stripe.entries.end()) return false;
  name_bytes_.fetch_sub(it->second.name.size(), std::memory_order_relaxed);
  stripe.entries.erase(it);
  size_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

uint64_t GenericKeys::Walk(uint64_t cursor, size_t budget, const Visitor& visit) {
  size_t visited = 0;
  bool any = false;
  uint64_t last_high = 0;
  for (size_t s = cursor >> kStripeShift; s < kStripes; ++s) {
    Stripe& stripe = stripes_[s];
    MutexLock lock(stripe.lock);
    auto it = stripe.entries.lower_bound(BlockKey{{.high = cursor, .low = 0}});
    while (it != stripe.entries.end()) {
      // Stop only between two cursor values, so that the next call starts at a whole one.
      if (visited >= budget && any && it->first.high != last_high) return it->first.high;
      any = true;
      last_high = it->first.high;
      ++visited;
      if (visit(stripe, it->first, it->second)) {
        ++it;
      } else {
        name_bytes_.fetch_sub(it->second.name.size(), std::memory_order_relaxed);
        it = stripe.entries.erase(it);
        size_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
  return 0;
}

// Redis' stringmatchlen, without its nocase flag: the same answers for the same pattern, so that
// KEYS and SCAN MATCH list what a Redis server would.
bool GlobMatches(std::string_view pattern, std::string_view text) {
  size_t p = 0;
  size_t t = 0;
  // Where to resume after the last `*`: its pattern position and the text it has taken so far.
  size_t star_p = std::string_view::npos;
  size_t star_t = 0;
  while (t < text.size()) {
    bool matched = false;
    size_t next_p = p;
    if (p < pattern.size()) {
      const char c = pattern[p];
      if (c == '*') {
        star_p = p++;
        star_t = t;
        continue;
      }
      if (c == '?') {
        matched = true;
        next_p = p + 1;
      } else if (c == '[') {
        size_t q = p + 1;
        const bool negate = q < pattern.size() && pattern[q] == '^';
        if (negate) ++q;
        bool in_set = false;
        while (q < pattern.size() && pattern[q] != ']') {
          if (pattern[q] == '\\' && q + 1 < pattern.size()) {
            ++q;
            in_set |= pattern[q] == text[t];
          } else if (q + 2 < pattern.size() && pattern[q + 1] == '-') {
            char lo = pattern[q];
            char hi = pattern[q + 2];
            if (lo > hi) std::swap(lo, hi);
            in_set |= text[t] >= lo && text[t] <= hi;
            q += 2;
          } else {
            in_set |= pattern[q] == text[t];
          }
          ++q;
        }
        matched = in_set != negate;
        // An unclosed set ends the pattern, as in Redis.
        next_p = q < pattern.size() ? q + 1 : q;
      } else if (c == '\\' && p + 1 < pattern.size()) {
        matched = pattern[p + 1] == text[t];
        next_p = p + 2;
      } else {
        matched = c == text[t];
        next_p = p + 1;
      }
    }
    if (matched) {
      p = next_p;
      ++t;
    } else if (star_p != std::string_view::npos) {
      p = star_p + 1;  // let the last `*` take one more byte
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

uint64_t UnixNowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace kvtier::server

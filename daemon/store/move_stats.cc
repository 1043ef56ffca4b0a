#include "daemon/store/move_stats.h"

namespace kvtier::store {

MoveStats::MoveStats(bool histograms)
    : histograms_(histograms), latency_(histograms ? kPairs : 0) {}

std::vector<MoveSeries> MoveStats::Snapshot(std::span<const TierId> chain) const {
  std::vector<MoveSeries> out;
  for (TierId from : chain) {
    for (TierId to : chain) {
      if (from == to) continue;
      const size_t pair = PairOf(from, to);
      MoveSeries s{from, to, blocks_[pair].load(std::memory_order_relaxed),
                   bytes_[pair].load(std::memory_order_relaxed)};
      if (histograms_) {
        s.timed = true;
        s.latency = latency_.Snapshot(pair);
      }
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace kvtier::store

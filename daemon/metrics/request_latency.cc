#include "daemon/metrics/request_latency.h"

namespace kvtier::metrics {

std::string_view RequestOpName(RequestOp op) {
  switch (op) {
    case RequestOp::kLookup:
      return "lookup";
    case RequestOp::kGet:
      return "get";
    case RequestOp::kPut:
      return "put";
    case RequestOp::kCommit:
      return "commit";
  }
  return "unknown";
}

std::string_view RequestPathName(RequestPath path) {
  switch (path) {
    case RequestPath::kShm:
      return "shm";
    case RequestPath::kInline:
      return "inline";
    case RequestPath::kGeneric:
      return "generic";
  }
  return "unknown";
}

std::string_view RequestTierName(std::optional<TierId> tier) {
  return tier ? TierName(*tier) : "none";
}

RequestLatency::RequestLatency(bool enabled)
    : histograms_(enabled ? kRequestOpCount * kRequestPathCount * kTierLabels : 0) {}

std::vector<RequestLatencySeries> RequestLatency::Snapshot() const {
  std::vector<RequestLatencySeries> out;
  for (size_t s = 0; s < histograms_.series(); ++s) {
    LatencySnapshot latency = histograms_.Snapshot(s);
    if (latency.count() == 0) continue;
    // SeriesOf, backwards.
    const size_t tier = s % kTierLabels;
    const size_t path = s / kTierLabels % kRequestPathCount;
    const size_t op = s / kTierLabels / kRequestPathCount;
    RequestLabels labels{static_cast<RequestOp>(op), static_cast<RequestPath>(path), std::nullopt};
    if (tier < kTierCount) labels.tier = static_cast<TierId>(tier);
    out.push_back({labels, latency});
  }
  return out;
}

}  // namespace kvtier::metrics

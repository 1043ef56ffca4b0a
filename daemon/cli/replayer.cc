#include "daemon/cli/replayer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "hashing/block_hasher.h"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxCallBytes = uint64_t{256} << 20;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

void FillTracePayload(uint64_t hash_id, std::span<std::byte> out) {
  uint64_t state = hash_id ^ 0x6b76746965722d72ULL;  // "kvtier-r": ids 0 and 1 differ at once
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t word = SplitMix64(state);
    std::memcpy(out.data() + i, &word, 8);
  }
  if (i < out.size()) {
    const uint64_t word = SplitMix64(state);
    std::memcpy(out.data() + i, &word, out.size() - i);
  }
}

hashing::NamespaceDescriptor TraceNamespace(uint64_t block_tokens, const std::string& salt) {
  hashing::NamespaceDescriptor d;
  d.model_id = "kvtier-replay";
  d.kv_dtype = "int8";
  d.num_layers = d.num_kv_heads = d.head_dim = 1;
  d.tokens_per_block = static_cast<uint32_t>(block_tokens);
  d.layout_tag = "mooncake-trace";
  d.tenant_salt = salt;
  return d;
}

std::vector<BlockKey> TraceKeys(const NamespaceId& ns, std::span<const uint64_t> hash_ids) {
  std::vector<BlockKey> keys;
  keys.reserve(hash_ids.size());
  Key128 parent = ns;
  for (uint64_t id : hash_ids) {
    std::byte le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<std::byte>(id >> (8 * b));
    keys.push_back(hashing::FoldForeignKey(parent, le));
    parent = keys.back();
  }
  return keys;
}

double ReplayTotals::block_hit_ratio() const {
  return blocks == 0 ? 0.0 : static_cast<double>(served_blocks) / static_cast<double>(blocks);
}

Replayer::Replayer(client::Client* client, NamespaceId ns, ReplayOptions options)
    : client_(client), ns_(ns), options_(options) {
  expected_.resize(options_.block_bytes);
}

void Replayer::ReserveBlocks(size_t n) {
  if (buffer_.size() < n * options_.block_bytes) buffer_.resize(n * options_.block_bytes);
}

size_t Replayer::ChunkBlocks() const {
  return static_cast<size_t>(std::max<uint64_t>(1, kMaxCallBytes / options_.block_bytes));
}

Result<size_t> Replayer::FetchPrefix(std::span<const BlockKey> keys,
                                     std::span<const uint64_t> ids) {
  const size_t bytes = options_.block_bytes;
  size_t served = 0;
  while (served < keys.size()) {
    const size_t n = std::min(ChunkBlocks(), keys.size() - served);
    ReserveBlocks(n);
    std::vector<void*> ptrs(n);
    std::vector<std::span<std::byte>> spans(n);
    for (size_t i = 0; i < n; ++i) {
      ptrs[i] = buffer_.data() + i * bytes;
      spans[i] = std::span(buffer_.data() + i * bytes, bytes);
    }
    const std::span<const BlockKey> chunk = keys.subspan(served, n);
    KVTIER_ASSIGN_OR_RETURN(size_t got, options_.shm ? client_->Get(ns_, chunk, ptrs, bytes)
                                                     : client_->GetInline(ns_, chunk, spans));
    for (size_t i = 0; i < got; ++i) {
      FillTracePayload(ids[served + i], expected_);
      if (std::memcmp(spans[i].data(), expected_.data(), bytes) != 0) {
        ++totals_.corrupt_blocks;
        return served + i;
      }
    }
    served += got;
    if (got < n) break;
  }
  return served;
}

Status Replayer::StoreRest(std::span<const BlockKey> keys, std::span<const uint64_t> ids) {
  const size_t bytes = options_.block_bytes;
  for (size_t start = 0; start < keys.size();) {
    const size_t n = std::min(ChunkBlocks(), keys.size() - start);
    ReserveBlocks(n);
    std::vector<const void*> ptrs(n);
    std::vector<std::span<const std::byte>> spans(n);
    for (size_t i = 0; i < n; ++i) {
      const std::span<std::byte> block(buffer_.data() + i * bytes, bytes);
      FillTracePayload(ids[start + i], block);
      ptrs[i] = block.data();
      spans[i] = block;
    }
    const std::span<const BlockKey> chunk = keys.subspan(start, n);
    KVTIER_ASSIGN_OR_RETURN(std::vector<Status> statuses,
                            options_.shm ? client_->Put(ns_, chunk, ptrs, bytes)
                                         : client_->PutInline(ns_, chunk, spans));
    for (const Status& s : statuses) {
      if (s.ok()) {
        ++totals_.stored_blocks;
      } else if (s.code() == StatusCode::kAlreadyExists) {
        ++totals_.existing_blocks;
      } else {
        ++totals_.failed_puts;
      }
    }
    start += n;
  }
  return Status::Ok();
}

Result<client::LookupResult> Replayer::Lookup(std::span<const BlockKey> keys) {
  if (options_.hold.count() == 0) return client_->Lookup(ns_, keys);
  const std::span<const BlockKey> chains[] = {keys};
  KVTIER_ASSIGN_OR_RETURN(std::vector<client::LookupResult> found,
                          client_->LookupMany(ns_, chains, options_.hold));
  return std::move(found.front());
}

Status Replayer::Replay(const TraceRequest& request) {
  const auto start = Clock::now();
  const std::vector<BlockKey> keys = TraceKeys(ns_, request.hash_ids);
  KVTIER_ASSIGN_OR_RETURN(client::LookupResult lookup, Lookup(keys));
  const auto looked_up = Clock::now();
  totals_.lookup_latency.Add(looked_up - start);

  size_t served = 0;
  const uint64_t corrupt_before = totals_.corrupt_blocks;
  if (lookup.prefix > 0) {
    KVTIER_ASSIGN_OR_RETURN(served,
                            FetchPrefix(std::span(keys).first(lookup.prefix), request.hash_ids));
    totals_.get_latency.Add(Clock::now() - looked_up);
  }
  const auto fetched = Clock::now();
  if (served < keys.size()) {
    KVTIER_RETURN_IF_ERROR(
        StoreRest(std::span(keys).subspan(served), std::span(request.hash_ids).subspan(served)));
    if (options_.refresh) {
      if (Status st = client_->Refresh(ns_, keys).status(); !st.ok()) {
        // A daemon older than KVT.REFRESH answers "unknown command": say what to do about it.
        return Status(st.code(), "KVT.REFRESH after the puts: " + st.message() +
                                     " (a kvtierd without KVT.REFRESH: pass --no-refresh)");
      }
    }
    totals_.put_latency.Add(Clock::now() - fetched);
  }
  totals_.request_latency.Add(Clock::now() - start);

  ++totals_.requests;
  totals_.blocks += keys.size();
  totals_.lookup_hit_blocks += lookup.prefix;
  totals_.served_blocks += served;
  for (size_t i = 0; i < served; ++i) ++totals_.served_by_tier[static_cast<int>(lookup.tiers[i])];
  totals_.lost_blocks += lookup.prefix - served - (totals_.corrupt_blocks - corrupt_before);
  totals_.input_tokens += request.input_tokens;
  totals_.hit_tokens += std::min<uint64_t>(served * options_.block_tokens, request.input_tokens);
  return Status::Ok();
}

}  // namespace kvtier::cli

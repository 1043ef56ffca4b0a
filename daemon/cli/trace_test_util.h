// For the simulator's tests: a trace request made of block ids, with 512 tokens per block unless
// the test says how many input tokens the request has, and the head of the published trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/cli/trace_reader.h"

namespace kvtier::cli::testing {

inline TraceRequest Request(std::vector<uint64_t> ids, uint64_t input_tokens = 0) {
  TraceRequest r;
  r.input_tokens = input_tokens > 0 ? input_tokens : ids.size() * 512;
  r.hash_ids = std::move(ids);
  return r;
}

// The first `requests` requests of the Mooncake conversation trace, which the repository keeps in
// tests/data (KVTIER_TRACE_DIR): a missing file is an error, not a reason to skip.
inline Result<std::vector<TraceRequest>> MooncakeTraceHead(size_t requests) {
  return ReadTrace(std::string(KVTIER_TRACE_DIR) + "/mooncake_conversation_trace.jsonl", requests);
}

}  // namespace kvtier::cli::testing

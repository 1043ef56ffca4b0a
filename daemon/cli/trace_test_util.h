// For the simulator's tests: a trace request made of block ids, with 512 tokens per block unless
// the test says how many input tokens the request has.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "daemon/cli/trace_reader.h"

namespace kvtier::cli::testing {

inline TraceRequest Request(std::vector<uint64_t> ids, uint64_t input_tokens = 0) {
  TraceRequest r;
  r.input_tokens = input_tokens > 0 ? input_tokens : ids.size() * 512;
  r.hash_ids = std::move(ids);
  return r;
}

}  // namespace kvtier::cli::testing

// Differential fuzz target for the trace line parser: wherever the fast path accepts a line, the
// full JSON parser must accept it too and read the same request; ParseTraceLine must never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/cli/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  (void)kvtier::cli::ParseTraceLine(line);
  kvtier::cli::TraceRequest fast;
  if (!kvtier::cli::ParseTraceLineFast(line, fast)) return 0;
  auto full = kvtier::cli::ParseTraceLineFull(line);
  if (!full.ok() || full->timestamp_ms != fast.timestamp_ms ||
      full->input_tokens != fast.input_tokens || full->output_tokens != fast.output_tokens ||
      full->hash_ids != fast.hash_ids) {
    __builtin_trap();
  }
  return 0;
}

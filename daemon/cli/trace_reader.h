// TraceReader: reads request traces in the Mooncake format, one JSON object per line.
//
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
//
// `timestamp` is the arrival time in milliseconds, `input_length` and `output_length` are token
// counts, and `hash_ids` names the prompt's blocks in order, one id per block (the last may be
// partial). An id names its block together with everything before it, so two requests share the
// KV of their first k blocks exactly when their first k ids are equal. All four fields are
// required non-negative integers; other fields are ignored; blank lines are skipped; a line with
// a NUL byte (a file a crash cut short) is malformed.
//
// Used by `kvtier simulate` (offline, no daemon) and `kvtier replay` (drives a daemon). A reader
// owns its file; one thread at a time.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier::cli {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  std::vector<uint64_t> hash_ids;
};

// Parses one line. kInvalidArgument names what is wrong ("missing \"hash_ids\"") but not where;
// TraceReader adds the file and line.
Result<TraceRequest> ParseTraceLine(std::string_view line);

// The same, into `request`, whose hash_ids keeps its capacity from line to line (a streaming
// reader then allocates nothing per line). On error `request` holds unspecified values.
Status ParseTraceLineInto(std::string_view line, TraceRequest& request);

// The two halves of ParseTraceLine, apart for the differential fuzz target (daemon/cli/fuzz).
// ParseTraceLineFast reads the subset of JSON the trace tools write (plain keys; unsigned
// integers, arrays of them, unescaped strings) without a DOM and returns false for any other line,
// leaving `request` unspecified; wherever it returns true, ParseTraceLineFull (nlohmann's parser)
// must give the same request. ParseTraceLine tries the first, then the second.
bool ParseTraceLineFast(std::string_view line, TraceRequest& request);
Result<TraceRequest> ParseTraceLineFull(std::string_view line);

class TraceReader {
 public:
  // Opens `path`. kNotFound / kPermissionDenied / kDeviceError from the open, with the path.
  static Result<TraceReader> Open(const std::string& path);

  // The next request; nullopt at the end of the file. A malformed line is kInvalidArgument with a
  // message "PATH:LINE: what" (1-based line): the trace is unusable, stop reading. A read error is
  // kDeviceError.
  Result<std::optional<TraceRequest>> Next();

  // The same into `request` (see ParseTraceLineInto): true when a request was read, false at the
  // end of the file; errors as for Next.
  Result<bool> NextInto(TraceRequest& request);

  // 1-based number of the last line read (0 before the first).
  uint64_t line_number() const { return line_number_; }

 private:
  TraceReader(std::string path, std::ifstream in) : path_(std::move(path)), in_(std::move(in)) {}

  std::string path_;
  std::ifstream in_;
  std::string line_;  // reused across lines
  uint64_t line_number_ = 0;
};

// Reads the whole trace, or its first `max_requests` requests when that is non-zero. Errors as
// for TraceReader::Open and Next.
Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t max_requests = 0);

}  // namespace kvtier::cli

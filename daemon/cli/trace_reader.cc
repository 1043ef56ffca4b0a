#include "daemon/cli/trace_reader.h"

#include <cerrno>
#include <nlohmann/json.hpp>
#include <utility>

namespace kvtier::cli {
namespace {

using Json = nlohmann::json;

// Reads a required non-negative integer field. Floats and negative numbers are rejected rather
// than rounded: a trace that has them was not produced by the tools this format comes from.
Result<uint64_t> UnsignedField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return InvalidArgument(std::string("missing \"") + name + "\"");
  if (!it->is_number_unsigned()) {
    return InvalidArgument(std::string("\"") + name + "\" is not a non-negative integer");
  }
  return it->get<uint64_t>();
}

Result<std::vector<uint64_t>> HashIds(const Json& object) {
  auto it = object.find("hash_ids");
  if (it == object.end()) return InvalidArgument("missing \"hash_ids\"");
  if (!it->is_array()) return InvalidArgument("\"hash_ids\" is not an array");
  std::vector<uint64_t> ids;
  ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& id = (*it)[i];
    if (!id.is_number_unsigned()) {
      return InvalidArgument("\"hash_ids\"[" + std::to_string(i) +
                             "] is not a non-negative integer");
    }
    ids.push_back(id.get<uint64_t>());
  }
  return ids;
}

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

Result<TraceRequest> ParseTraceLine(std::string_view line) {
  // Parse without exceptions: a malformed trace is an expected input, not a bug.
  Json object = Json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return InvalidArgument("not valid JSON");
  if (!object.is_object()) return InvalidArgument("not a JSON object");
  TraceRequest request;
  KVTIER_ASSIGN_OR_RETURN(request.timestamp_ms, UnsignedField(object, "timestamp"));
  KVTIER_ASSIGN_OR_RETURN(request.input_tokens, UnsignedField(object, "input_length"));
  KVTIER_ASSIGN_OR_RETURN(request.output_tokens, UnsignedField(object, "output_length"));
  KVTIER_ASSIGN_OR_RETURN(request.hash_ids, HashIds(object));
  return request;
}

Result<TraceReader> TraceReader::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return ErrnoStatus(errno, "cannot open trace " + path);
  return TraceReader(path, std::move(in));
}

Result<std::optional<TraceRequest>> TraceReader::Next() {
  while (std::getline(in_, line_)) {
    ++line_number_;
    if (IsBlank(line_)) continue;
    Result<TraceRequest> request = ParseTraceLine(line_);
    if (!request.ok()) {
      return InvalidArgument(path_ + ":" + std::to_string(line_number_) + ": " +
                             request.status().message());
    }
    return std::optional<TraceRequest>(std::move(request).value());
  }
  if (in_.bad()) {
    return DeviceError("read error in " + path_ + " after line " + std::to_string(line_number_));
  }
  return std::optional<TraceRequest>();
}

Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t max_requests) {
  KVTIER_ASSIGN_OR_RETURN(TraceReader reader, TraceReader::Open(path));
  std::vector<TraceRequest> requests;
  while (max_requests == 0 || requests.size() < max_requests) {
    KVTIER_ASSIGN_OR_RETURN(std::optional<TraceRequest> request, reader.Next());
    if (!request) break;
    requests.push_back(std::move(*request));
  }
  return requests;
}

}  // namespace kvtier::cli

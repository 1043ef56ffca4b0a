#include "daemon/cli/trace_reader.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

namespace kvtier::cli {
namespace {

using Json = nlohmann::json;

// The required fields, in the order a missing one is reported. Both parsers take the names from
// here, so they cannot disagree on one.
struct IntegerField {
  std::string_view name;
  uint64_t TraceRequest::*member;
};
constexpr IntegerField kIntegerFields[] = {{"timestamp", &TraceRequest::timestamp_ms},
                                           {"input_length", &TraceRequest::input_tokens},
                                           {"output_length", &TraceRequest::output_tokens}};
constexpr std::string_view kHashIds = "hash_ids";

// Reads a required non-negative integer field. Floats and negative numbers are rejected rather
// than rounded: a trace that has them was not produced by the tools this format comes from.
Result<uint64_t> UnsignedField(const Json& object, std::string_view name) {
  auto it = object.find(name);
  if (it == object.end()) return InvalidArgument("missing \"" + std::string(name) + "\"");
  if (!it->is_number_unsigned()) {
    return InvalidArgument("\"" + std::string(name) + "\" is not a non-negative integer");
  }
  return it->get<uint64_t>();
}

Result<std::vector<uint64_t>> HashIds(const Json& object) {
  auto it = object.find(kHashIds);
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

// The fast path: a cursor over one line that accepts only a strict subset of JSON, the shape the
// trace tools write (an object of plain keys whose values are unsigned integers, arrays of them,
// or strings without escapes), with no DOM and no allocation beyond hash_ids. Building a DOM per
// line was a fifth of a simulate run. Anything outside the subset (escapes, floats, nesting,
// a duplicated field, a missing field, an error) makes it give up, and the line goes through the
// full parser, which gives the same result or the error message. So the subset only has to be
// accepted correctly, never diagnosed.
class FastLine {
 public:
  explicit FastLine(std::string_view line) : s_(line) {}

  bool Parse(TraceRequest& out);

 private:
  static constexpr size_t kFields = std::size(kIntegerFields) + 1;  // hash_ids last

  void SkipSpace() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) {
      ++i_;
    }
  }
  bool Take(char c) {
    SkipSpace();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  bool Peek(char c) {
    SkipSpace();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool String(std::string_view& text);
  bool Unsigned(uint64_t& value);
  bool Ids(std::vector<uint64_t>& ids);
  bool Member(TraceRequest& out, std::array<bool, kFields>& seen);
  // False for a field seen before on this line: the full parser lets the last one win, so the
  // fast path gives such a line up.
  static bool FirstTime(bool& seen) { return !std::exchange(seen, true); }

  std::string_view s_;
  size_t i_ = 0;
};

// A string of printable ASCII without escapes: what nlohmann accepts and decodes to the same bytes.
bool FastLine::String(std::string_view& text) {
  if (!Take('"')) return false;
  const size_t begin = i_;
  while (i_ < s_.size() && s_[i_] != '"') {
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c < 0x20 || c > 0x7e || c == '\\') return false;
    ++i_;
  }
  if (i_ >= s_.size()) return false;
  text = s_.substr(begin, i_ - begin);
  ++i_;
  return true;
}

// A JSON integer without sign, fraction or exponent that fits 64 bits. A leading zero followed by
// a digit, or a '.', 'e' or '-', leaves a character the caller's grammar rejects.
bool FastLine::Unsigned(uint64_t& value) {
  SkipSpace();
  // A local cursor: with i_ the compiler stored it back on every digit, as `value` might alias it.
  size_t i = i_;
  if (i >= s_.size() || s_[i] < '0' || s_[i] > '9') return false;
  uint64_t v = 0;
  if (s_[i] == '0') {
    ++i;
  } else {
    for (; i < s_.size() && s_[i] >= '0' && s_[i] <= '9'; ++i) {
      // Overflow checked with the carry flags rather than a comparison against a quotient.
      if (__builtin_mul_overflow(v, uint64_t{10}, &v) ||
          __builtin_add_overflow(v, static_cast<uint64_t>(s_[i] - '0'), &v)) {
        return false;
      }
    }
  }
  if (i < s_.size() && (s_[i] == '.' || s_[i] == 'e' || s_[i] == 'E')) return false;
  i_ = i;
  value = v;
  return true;
}

bool FastLine::Ids(std::vector<uint64_t>& ids) {
  ids.clear();
  if (!Take('[')) return false;
  if (Take(']')) return true;
  do {
    uint64_t id;
    if (!Unsigned(id)) return false;
    ids.push_back(id);
  } while (Take(','));
  return Take(']');
}

// One "key": value pair. Known keys fill `out` once each; other keys may hold an unsigned integer
// or a plain string, and are skipped.
bool FastLine::Member(TraceRequest& out, std::array<bool, kFields>& seen) {
  std::string_view key;
  if (!String(key) || !Take(':')) return false;
  for (size_t f = 0; f < std::size(kIntegerFields); ++f) {
    if (key == kIntegerFields[f].name) {
      return FirstTime(seen[f]) && Unsigned(out.*kIntegerFields[f].member);
    }
  }
  if (key == kHashIds) return FirstTime(seen.back()) && Ids(out.hash_ids);
  uint64_t number;
  std::string_view text;
  return Peek('"') ? String(text) : Unsigned(number);
}

bool FastLine::Parse(TraceRequest& out) {
  std::array<bool, kFields> seen{};
  if (!Take('{')) return false;
  if (!Peek('}')) {
    do {
      if (!Member(out, seen)) return false;
    } while (Take(','));
  }
  if (!Take('}')) return false;
  SkipSpace();
  return i_ == s_.size() && std::all_of(seen.begin(), seen.end(), [](bool b) { return b; });
}

}  // namespace

bool ParseTraceLineFast(std::string_view line, TraceRequest& request) {
  return FastLine(line).Parse(request);
}

Result<TraceRequest> ParseTraceLineFull(std::string_view line) {
  // nlohmann's lexer takes a NUL byte for the end of its input, so `{...}\0{"bogus` would parse
  // as the request before the NUL. A text trace holds none unless it was cut short, by a crash
  // that left zeros where the file's last writes never landed: refuse the line.
  if (line.find('\0') != std::string_view::npos) return InvalidArgument("NUL byte in the line");
  // Parse without exceptions: a malformed trace is an expected input, not a bug.
  Json object = Json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return InvalidArgument("not valid JSON");
  if (!object.is_object()) return InvalidArgument("not a JSON object");
  TraceRequest request;
  for (const IntegerField& field : kIntegerFields) {
    KVTIER_ASSIGN_OR_RETURN(request.*field.member, UnsignedField(object, field.name));
  }
  KVTIER_ASSIGN_OR_RETURN(request.hash_ids, HashIds(object));
  return request;
}

Status ParseTraceLineInto(std::string_view line, TraceRequest& request) {
  if (ParseTraceLineFast(line, request)) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(request, ParseTraceLineFull(line));
  return Status::Ok();
}

Result<TraceRequest> ParseTraceLine(std::string_view line) {
  TraceRequest request;
  KVTIER_RETURN_IF_ERROR(ParseTraceLineInto(line, request));
  return request;
}

Result<TraceReader> TraceReader::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return ErrnoStatus(errno, "cannot open trace " + path);
  return TraceReader(path, std::move(in));
}

Result<std::optional<TraceRequest>> TraceReader::Next() {
  TraceRequest request;
  KVTIER_ASSIGN_OR_RETURN(bool found, NextInto(request));
  if (!found) return std::optional<TraceRequest>();
  return std::optional<TraceRequest>(std::move(request));
}

Result<bool> TraceReader::NextInto(TraceRequest& request) {
  while (std::getline(in_, line_)) {
    ++line_number_;
    if (IsBlank(line_)) continue;
    Status st = ParseTraceLineInto(line_, request);
    if (!st.ok()) {
      return InvalidArgument(path_ + ":" + std::to_string(line_number_) + ": " + st.message());
    }
    return true;
  }
  if (in_.bad()) {
    return DeviceError("read error in " + path_ + " after line " + std::to_string(line_number_));
  }
  return false;
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

#include "common/resp/reply_parser.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <system_error>
#include <utility>

#include "common/resp/protocol.h"

namespace kvtier::resp {
namespace {

// A length line holds at most '-' and 19 digits (see request_parser.cc).
constexpr size_t kMaxLengthLine = 20;
// Element slots reserved by an aggregate header before its elements arrive.
constexpr size_t kInitialSlots = 16;

constexpr std::string_view kInvalidBulkLength = "Protocol error: invalid bulk length";
constexpr std::string_view kInvalidMultibulkLength = "Protocol error: invalid multibulk length";
constexpr std::string_view kReplyTooBig = "Protocol error: too big reply";

bool IsBulkType(char t) { return t == '$' || t == '!' || t == '='; }
bool IsAggregateType(char t) { return t == '*' || t == '%' || t == '~' || t == '>' || t == '|'; }
bool IsScalarType(char t) {
  return t == '+' || t == '-' || t == ':' || t == ',' || t == '(' || t == '#' || t == '_';
}

// RESP3 doubles: an optional sign, digits, optional fraction and exponent, or inf / -inf / nan.
bool ParseDouble(std::string_view text, double* out) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-' && text[1] != '+') {
    text.remove_prefix(1);  // RESP3 allows '+', std::from_chars does not
  }
  if (text.empty()) return false;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), *out);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

bool IsBigNumber(std::string_view text) {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

size_t TreeCapacity(const Reply& node) {
  size_t total =
      node.str.capacity() + node.format.capacity() + node.elements.capacity() * sizeof(Reply);
  for (const Reply& child : node.elements) total += TreeCapacity(child);
  return total;
}

}  // namespace

ReplyParser::ReplyParser(Options options) : options_(options) {}

Result<size_t> ReplyParser::Feed(std::string_view input) {
  const size_t offered = input.size();
  while (!input.empty() && state_ != State::kReady && state_ != State::kFailed) {
    Status status = Step(input);
    if (!status.ok()) return status;
  }
  if (state_ == State::kFailed) return error_;
  return offered - input.size();
}

Reply ReplyParser::TakeReply() {
  Reply out = std::move(result_);
  result_ = Reply{};
  reply_bytes_ = 0;
  state_ = State::kType;
  return out;
}

size_t ReplyParser::buffered_capacity_bytes() const {
  size_t total = line_.capacity() + TreeCapacity(bulk_) + stack_.capacity() * sizeof(Frame);
  for (const Frame& frame : stack_) total += TreeCapacity(frame.node);
  return total;
}

void ReplyParser::Consume(std::string_view& input, size_t n) {
  input.remove_prefix(n);
  consumed_bytes_ += n;
  reply_bytes_ += n;
}

Status ReplyParser::Step(std::string_view& input) {
  switch (state_) {
    case State::kType:
      return StepType(input);
    case State::kLine:
      return StepLine(input);
    case State::kBulkBody:
      return StepBulkBody(input);
    case State::kBulkCrlf:
      return StepBulkCrlf(input);
    case State::kReady:
    case State::kFailed:
      break;
  }
  return Status::Ok();
}

Status ReplyParser::StepType(std::string_view& input) {
  const char c = input.front();
  if (!IsScalarType(c) && !IsBulkType(c) && !IsAggregateType(c)) {
    return Fail("Protocol error: unknown reply type '" + DescribeByte(c) + "'");
  }
  Consume(input, 1);
  type_ = c;
  state_ = State::kLine;
  return Status::Ok();
}

Status ReplyParser::StepLine(std::string_view& input) {
  const bool length_line = IsBulkType(type_) || IsAggregateType(type_);
  const size_t limit = length_line ? kMaxLengthLine : options_.max_line_bytes;
  while (!input.empty()) {
    if (saw_cr_) {
      const char c = input.front();
      Consume(input, 1);
      saw_cr_ = false;
      if (c != '\n') return Fail("Protocol error: CR not followed by LF");
      return OnLine(input.size());
    }
    const size_t end = std::min(input.find_first_of("\r\n"), input.size());
    if (line_.size() + end > limit) {
      if (!length_line) return Fail("Protocol error: too big reply line");
      return Fail(std::string(IsBulkType(type_) ? kInvalidBulkLength : kInvalidMultibulkLength));
    }
    line_.append(input.data(), end);
    Consume(input, end);
    if (input.empty()) break;
    if (input.front() == '\n') return Fail("Protocol error: LF not preceded by CR");
    Consume(input, 1);
    saw_cr_ = true;
  }
  return Status::Ok();
}

Status ReplyParser::OnLine(size_t bytes_available) {
  // Checked at the end of each line, so the error does not depend on how the bytes were split.
  if (reply_bytes_ > options_.max_reply_bytes) return Fail(std::string(kReplyTooBig));
  Status status;
  if (IsBulkType(type_)) {
    status = OnBulkHeader(bytes_available);
  } else if (IsAggregateType(type_)) {
    status = OnAggregateHeader();
  } else {
    status = OnScalarLine();
  }
  line_.clear();
  return status;
}

Status ReplyParser::OnScalarLine() {
  Reply value;
  switch (type_) {
    case '+':
      value.type = ReplyType::kSimpleString;
      break;
    case '-':
      value.type = ReplyType::kError;
      break;
    case ':': {
      const std::optional<int64_t> parsed = ParseInt64(line_);
      if (!parsed) return Fail("Protocol error: invalid integer");
      value.type = ReplyType::kInteger;
      value.integer = *parsed;
      break;
    }
    case ',':
      if (!ParseDouble(line_, &value.number)) return Fail("Protocol error: invalid double");
      value.type = ReplyType::kDouble;
      break;
    case '(':
      if (!IsBigNumber(line_)) return Fail("Protocol error: invalid big number");
      value.type = ReplyType::kBigNumber;
      break;
    case '#':
      if (line_ != "t" && line_ != "f") return Fail("Protocol error: invalid boolean");
      value.type = ReplyType::kBoolean;
      value.integer = line_ == "t" ? 1 : 0;
      break;
    default:  // '_'
      if (!line_.empty()) return Fail("Protocol error: invalid null");
      value.type = ReplyType::kNull;
      break;
  }
  if (value.type != ReplyType::kInteger && value.type != ReplyType::kBoolean &&
      value.type != ReplyType::kNull) {
    value.str = line_;
  }
  Emit(std::move(value));
  return Status::Ok();
}

Status ReplyParser::OnBulkHeader(size_t bytes_available) {
  const std::optional<int64_t> length = ParseInt64(line_);
  if (length && *length == -1 && type_ == '$') {  // RESP2 null bulk
    Emit(Reply::Null());
    return Status::Ok();
  }
  if (!length || *length < 0 || static_cast<uint64_t>(*length) > options_.max_bulk_bytes) {
    return Fail(std::string(kInvalidBulkLength));
  }
  const auto declared = static_cast<size_t>(*length);
  if (type_ == '=' && declared < 4) return Fail("Protocol error: invalid verbatim string");
  // Refuse now rather than after buffering a payload that cannot fit.
  if (reply_bytes_ > options_.max_reply_bytes ||
      declared + 2 > options_.max_reply_bytes - reply_bytes_) {
    return Fail(std::string(kReplyTooBig));
  }
  bulk_ = Reply{};
  bulk_.type = type_ == '$'   ? ReplyType::kBulkString
               : type_ == '!' ? ReplyType::kError
                              : ReplyType::kVerbatim;
  // Reserve what is already buffered (often the whole payload), or the declared length up to
  // the option's bound.
  bulk_.str.reserve(std::min(declared, std::max(bytes_available, options_.reserve_declared_up_to)));
  bulk_declared_ = declared;
  bulk_left_ = declared;
  crlf_seen_ = 0;
  state_ = declared == 0 ? State::kBulkCrlf : State::kBulkBody;
  return Status::Ok();
}

Status ReplyParser::StepBulkBody(std::string_view& input) {
  const size_t n = std::min(bulk_left_, input.size());
  const size_t filled = bulk_declared_ - bulk_left_;
  if (bulk_.str.size() == filled) {
    ReservePayload(bulk_.str, n, bulk_declared_);
    bulk_.str.append(input.data(), n);
  } else {
    // Room made by BeginInPlace and not all filled: the bytes go there.
    if (bulk_.str.size() < filled + n) bulk_.str.resize(filled + n);
    std::memcpy(bulk_.str.data() + filled, input.data(), n);
  }
  Consume(input, n);
  bulk_left_ -= n;
  if (bulk_left_ == 0) state_ = State::kBulkCrlf;
  return Status::Ok();
}

std::span<char> ReplyParser::BeginInPlace(size_t max) {
  if (state_ != State::kBulkBody) return {};
  const size_t k = std::min(max, bulk_left_);
  const size_t filled = bulk_declared_ - bulk_left_;
  // The string never grows past the declared length (k <= bulk_left_), and bytes sized but not
  // filled by an earlier call are reused, not zeroed again.
  if (bulk_.str.size() < filled + k) {
    ReservePayload(bulk_.str, filled + k - bulk_.str.size(), bulk_declared_);
    bulk_.str.resize(filled + k);
  }
  return {bulk_.str.data() + filled, k};
}

void ReplyParser::CommitInPlace(size_t n) {
  if (state_ != State::kBulkBody || n == 0) return;
  // Never past the room BeginInPlace made: the bytes beyond it were not written by the caller.
  n = std::min(n, bulk_.str.size() - (bulk_declared_ - bulk_left_));
  consumed_bytes_ += n;
  reply_bytes_ += n;
  bulk_left_ -= n;
  if (bulk_left_ == 0) state_ = State::kBulkCrlf;
}

Status ReplyParser::StepBulkCrlf(std::string_view& input) {
  Consume(input, ReadPayloadCrlf(input, crlf_seen_));
  if (crlf_seen_ < 2 && !input.empty()) return Fail(std::string(kPayloadWithoutCrlf));
  return crlf_seen_ == 2 ? FinishBulk() : Status::Ok();
}

Status ReplyParser::FinishBulk() {
  if (bulk_.type == ReplyType::kVerbatim) {
    // "txt:<text>": a three-character format, a colon, the text.
    if (bulk_.str[3] != ':') return Fail("Protocol error: invalid verbatim string");
    bulk_.format = bulk_.str.substr(0, 3);
    bulk_.str.erase(0, 4);
  }
  Reply value = std::move(bulk_);
  bulk_ = Reply{};
  Emit(std::move(value));
  return Status::Ok();
}

Status ReplyParser::OnAggregateHeader() {
  const std::optional<int64_t> count = ParseInt64(line_);
  if (count && *count == -1 && type_ == '*') {  // RESP2 null array
    Emit(Reply::Null());
    return Status::Ok();
  }
  const bool pairs = type_ == '%' || type_ == '|';
  if (!count || *count < 0 ||
      static_cast<uint64_t>(*count) > options_.max_aggregate_len / (pairs ? 2 : 1)) {
    return Fail(std::string(kInvalidMultibulkLength));
  }
  if (stack_.size() >= options_.max_depth) return Fail("Protocol error: reply nested too deeply");
  Frame frame;
  frame.left = static_cast<size_t>(*count) * (pairs ? 2 : 1);
  frame.attribute = type_ == '|';
  switch (type_) {
    case '%':
      frame.node.type = ReplyType::kMap;
      break;
    case '~':
      frame.node.type = ReplyType::kSet;
      break;
    case '>':
      frame.node.type = ReplyType::kPush;
      break;
    default:
      frame.node.type = ReplyType::kArray;
      break;
  }
  if (frame.left == 0) {
    if (frame.attribute) {
      state_ = State::kType;  // an empty attribute annotates the value that follows
    } else {
      Emit(std::move(frame.node));
    }
    return Status::Ok();
  }
  if (!frame.attribute) frame.node.elements.reserve(std::min(frame.left, kInitialSlots));
  stack_.push_back(std::move(frame));
  state_ = State::kType;
  return Status::Ok();
}

void ReplyParser::Emit(Reply value) {
  while (!stack_.empty()) {
    Frame& top = stack_.back();
    if (!top.attribute) top.node.elements.push_back(std::move(value));
    if (--top.left > 0) {
      state_ = State::kType;
      return;
    }
    Frame done = std::move(top);
    stack_.pop_back();
    if (done.attribute) {
      // The attribute is dropped; the value it annotates comes next, in the same position.
      state_ = State::kType;
      return;
    }
    value = std::move(done.node);
  }
  result_ = std::move(value);
  state_ = State::kReady;
}

Status ReplyParser::Fail(std::string message) {
  error_ = InvalidArgument(std::move(message));
  state_ = State::kFailed;
  stack_.clear();
  bulk_ = Reply{};
  line_ = std::string();
  return error_;
}

}  // namespace kvtier::resp

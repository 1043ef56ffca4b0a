#include "common/resp/request_parser.h"

#include <algorithm>

#include "common/resp/protocol.h"

namespace kvtier::resp {
namespace {

// A length line holds at most '-' and 19 digits; anything longer cannot be a valid length, so the
// line is refused at the 21st byte instead of being buffered up to the inline limit.
constexpr size_t kMaxLengthLine = 20;
// Argument slots reserved by an array header before any element arrives; the vector grows with the
// elements that do arrive, so `*1048576` alone costs no more than `*2`.
constexpr size_t kInitialArgSlots = 16;
// The smallest wire form of one element, "$0\r\n\r\n": an array header declaring more elements
// than could fit in max_command_bytes is refused at once.
constexpr size_t kMinElementBytes = 6;

constexpr std::string_view kInvalidMultibulkLength = "Protocol error: invalid multibulk length";
constexpr std::string_view kInvalidBulkLength = "Protocol error: invalid bulk length";
constexpr std::string_view kCommandTooBig = "Protocol error: too big command";

// Bytes that end or break an inline run: CR, LF, and control bytes other than TAB. Bytes >= 0x80
// pass, so UTF-8 keys typed in telnet work; a TLS ClientHello (0x16 0x03 ...) or other binary
// protocol sent to the port is refused at its first byte.
bool IsInlineSpecial(char c) {
  auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t') || u == 0x7f;
}

}  // namespace

std::string_view Command::name() const {
  return args.empty() ? std::string_view() : std::string_view(args.front());
}

bool Command::NameIs(std::string_view name) const { return EqualsIgnoreCase(this->name(), name); }

std::string Command::UpperName() const { return ToUpperAscii(name()); }

RequestParser::RequestParser(Options options) : options_(options) {}

Result<size_t> RequestParser::Feed(std::string_view input) {
  if (window_bytes_ != 0) CommitBulk(0);  // an uncommitted window holds no data
  const size_t offered = input.size();
  while (!input.empty() && state_ != State::kReady && state_ != State::kFailed) {
    Status status = Step(input);
    if (!status.ok()) return status;
  }
  if (state_ == State::kFailed) return error_;
  return offered - input.size();
}

Command RequestParser::TakeCommand() {
  Command out = std::move(command_);
  command_ = Command{};
  command_bytes_ = 0;
  state_ = State::kStart;
  return out;
}

size_t RequestParser::buffered_capacity_bytes() const {
  size_t total = line_.capacity() + command_.args.capacity() * sizeof(std::string);
  for (const std::string& arg : command_.args) total += arg.capacity();
  return total;
}

size_t RequestParser::pending_bulk_bytes() const {
  return state_ == State::kBulkBody ? bulk_left_ : 0;
}

std::span<char> RequestParser::BulkWindow(size_t max_bytes) {
  if (window_bytes_ != 0) CommitBulk(0);
  if (state_ != State::kBulkBody || max_bytes == 0) return {};
  const size_t n = std::min(max_bytes, bulk_left_);
  if (!sink_.empty()) {
    window_bytes_ = n;
    return sink_.subspan(bulk_declared_ - bulk_left_, n);
  }
  ReserveBulk(n);
  std::string& arg = command_.args.back();
  const size_t old_size = arg.size();
  arg.resize(old_size + n);
  window_bytes_ = n;
  return std::span<char>(arg.data() + old_size, n);
}

void RequestParser::CommitBulk(size_t filled) {
  if (state_ != State::kBulkBody) return;
  filled = std::min(filled, window_bytes_);
  if (sink_.empty()) {
    std::string& arg = command_.args.back();
    arg.resize(arg.size() - window_bytes_ + filled);
  }
  window_bytes_ = 0;
  bulk_left_ -= filled;
  consumed_bytes_ += filled;
  command_bytes_ += filled;
  if (bulk_left_ == 0) {
    crlf_seen_ = 0;
    state_ = State::kBulkCrlf;
  }
}

bool RequestParser::DivertBulk(std::span<char> sink) {
  if (window_bytes_ != 0) CommitBulk(0);
  if (state_ != State::kBulkBody || sink.size() != bulk_declared_ || command_.diverted_arg >= 0) {
    return false;
  }
  std::string& arg = command_.args.back();
  std::copy(arg.begin(), arg.end(), sink.begin());
  std::string().swap(arg);
  sink_ = sink;
  command_.diverted_arg = static_cast<int>(command_.args.size() - 1);
  return true;
}

void RequestParser::Consume(std::string_view& input, size_t n) {
  input.remove_prefix(n);
  consumed_bytes_ += n;
  command_bytes_ += n;
}

Status RequestParser::Step(std::string_view& input) {
  switch (state_) {
    case State::kStart:
      return StepStart(input);
    case State::kInline:
      return StepInline(input);
    case State::kArrayHeader:
    case State::kBulkHeader:
      return StepHeaderLine(input);
    case State::kBulkType:
      return StepBulkType(input);
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

Status RequestParser::StepStart(std::string_view& input) {
  // Redis' rule: a command starting with '*' is a RESP array, anything else is an inline command.
  if (input.front() == '*') {
    Consume(input, 1);
    state_ = State::kArrayHeader;
  } else {
    state_ = State::kInline;
  }
  return Status::Ok();
}

Status RequestParser::StepInline(std::string_view& input) {
  while (!input.empty()) {
    const char c = input.front();
    if (saw_cr_) {
      if (c != '\n') return Fail("Protocol error: CR not followed by LF in inline request");
      Consume(input, 1);
      saw_cr_ = false;
      return FinishInline();
    }
    if (c == '\n') {  // a bare LF ends the line too, as in Redis
      Consume(input, 1);
      return FinishInline();
    }
    if (c == '\r') {
      Consume(input, 1);
      saw_cr_ = true;
      continue;
    }
    if (IsInlineSpecial(c)) {
      return Fail("Protocol error: invalid byte '" + DescribeByte(c) + "' in inline request");
    }
    // Copy the whole run of ordinary bytes at once.
    const auto run_end = std::find_if(input.begin(), input.end(), IsInlineSpecial);
    const size_t run = static_cast<size_t>(run_end - input.begin());
    // One limit, one message: checking two limits in turn would make the error depend on how the
    // line was split into reads. The line terminator is not counted.
    if (line_.size() + run > std::min(options_.max_inline_bytes, options_.max_command_bytes)) {
      return Fail("Protocol error: too big inline request");
    }
    line_.append(input.data(), run);
    Consume(input, run);
  }
  return Status::Ok();
}

Status RequestParser::FinishInline() {
  size_t pos = 0;
  while (pos < line_.size()) {
    const size_t begin = line_.find_first_not_of(" \t", pos);
    if (begin == std::string::npos) break;
    size_t end = line_.find_first_of(" \t", begin);
    if (end == std::string::npos) end = line_.size();
    command_.args.emplace_back(line_, begin, end - begin);
    pos = end;
  }
  line_.clear();
  // An empty line is ignored, as Redis does, so a stray newline from telnet is harmless.
  if (command_.args.empty()) {
    state_ = State::kStart;
    command_bytes_ = 0;
  } else {
    state_ = State::kReady;
  }
  return Status::Ok();
}

Status RequestParser::StepHeaderLine(std::string_view& input) {
  const bool array = state_ == State::kArrayHeader;
  const std::string_view error = array ? kInvalidMultibulkLength : kInvalidBulkLength;
  while (!input.empty()) {
    const char c = input.front();
    Consume(input, 1);
    if (saw_cr_) {
      saw_cr_ = false;
      if (c != '\n') return Fail(std::string(error));
      return array ? OnArrayHeader(line_) : OnBulkHeader(line_, input.size());
    }
    if (c == '\r') {
      saw_cr_ = true;
      continue;
    }
    if (line_.size() >= kMaxLengthLine) return Fail(std::string(error));
    line_.push_back(c);
  }
  return Status::Ok();
}

Status RequestParser::OnArrayHeader(std::string_view line) {
  const std::optional<int64_t> count = ParseInt64(line);
  line_.clear();
  if (!count || *count < -1 ||
      static_cast<uint64_t>(std::max<int64_t>(*count, 0)) > options_.max_array_len) {
    return Fail(std::string(kInvalidMultibulkLength));
  }
  if (*count <= 0) {  // `*0` and `*-1` are ignored, as Redis does
    state_ = State::kStart;
    command_bytes_ = 0;
    return Status::Ok();
  }
  elements_left_ = static_cast<size_t>(*count);
  if (elements_left_ >
      (options_.max_command_bytes - std::min(options_.max_command_bytes, command_bytes_)) /
          kMinElementBytes) {
    return Fail(std::string(kCommandTooBig));
  }
  command_.args.reserve(std::min(elements_left_, kInitialArgSlots));
  state_ = State::kBulkType;
  return Status::Ok();
}

Status RequestParser::StepBulkType(std::string_view& input) {
  const char c = input.front();
  if (c != '$') return Fail("Protocol error: expected '$', got '" + DescribeByte(c) + "'");
  Consume(input, 1);
  state_ = State::kBulkHeader;
  return Status::Ok();
}

Status RequestParser::OnBulkHeader(std::string_view line, size_t bytes_available) {
  const std::optional<int64_t> length = ParseInt64(line);
  line_.clear();
  if (!length || *length < 0 || static_cast<uint64_t>(*length) > options_.max_bulk_bytes) {
    return Fail(std::string(kInvalidBulkLength));
  }
  const auto declared = static_cast<size_t>(*length);
  // Refuse now rather than after the payload has been received and buffered.
  if (command_bytes_ > options_.max_command_bytes ||
      declared + 2 > options_.max_command_bytes - command_bytes_) {
    return Fail(std::string(kCommandTooBig));
  }
  --elements_left_;
  std::string& arg = command_.args.emplace_back();
  bulk_declared_ = declared;
  bulk_left_ = declared;
  crlf_seen_ = 0;
  if (declared == 0) {
    state_ = State::kBulkCrlf;
    return Status::Ok();
  }
  // Reserve what is already here (often the whole payload, in one allocation), never more.
  arg.reserve(std::min(declared, bytes_available));
  state_ = State::kBulkBody;
  return Status::Ok();
}

void RequestParser::ReserveBulk(size_t extra) {
  ReservePayload(command_.args.back(), extra, bulk_declared_);
}

Status RequestParser::StepBulkBody(std::string_view& input) {
  const size_t n = std::min(bulk_left_, input.size());
  if (!sink_.empty()) {
    std::copy_n(input.data(), n,
                sink_.begin() + static_cast<ptrdiff_t>(bulk_declared_ - bulk_left_));
  } else {
    ReserveBulk(n);
    command_.args.back().append(input.data(), n);
  }
  Consume(input, n);
  bulk_left_ -= n;
  if (bulk_left_ == 0) {
    crlf_seen_ = 0;
    state_ = State::kBulkCrlf;
  }
  return Status::Ok();
}

Status RequestParser::StepBulkCrlf(std::string_view& input) {
  Consume(input, ReadPayloadCrlf(input, crlf_seen_));
  if (crlf_seen_ < 2 && !input.empty()) return Fail(std::string(kPayloadWithoutCrlf));
  if (crlf_seen_ == 2) FinishElement();
  return Status::Ok();
}

void RequestParser::FinishElement() {
  sink_ = {};
  state_ = elements_left_ == 0 ? State::kReady : State::kBulkType;
}

Status RequestParser::Fail(std::string message) {
  error_ = InvalidArgument(std::move(message));
  state_ = State::kFailed;
  // Nothing of the broken command will be used; give its memory back now.
  command_ = Command{};
  line_ = std::string();
  window_bytes_ = 0;
  return error_;
}

}  // namespace kvtier::resp

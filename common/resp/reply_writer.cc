#include "common/resp/reply_writer.h"

#include "common/resp/status_words.h"

#include <charconv>
#include <cmath>

namespace kvtier::resp {

void ReplyWriter::AppendLine(char type, std::string_view text) {
  out_->push_back(type);
  const size_t start = out_->size();
  out_->append(text);
  // A simple string or error cannot carry CR or LF; blanking them keeps the stream framed even if
  // a message quotes user input.
  for (size_t i = start; i < out_->size(); ++i) {
    char& c = (*out_)[i];
    if (c == '\r' || c == '\n') c = ' ';
  }
  out_->append(kCrlf);
}

void ReplyWriter::AppendLength(char type, size_t length) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), length);
  out_->push_back(type);
  out_->append(digits, result.ptr);
  out_->append(kCrlf);
}

void ReplyWriter::AppendSimpleString(std::string_view text) { AppendLine('+', text); }

void ReplyWriter::AppendError(std::string_view message) { AppendLine('-', message); }

void ReplyWriter::AppendError(const Status& status) {
  std::string line(StatusWord(status.code()));
  if (!status.message().empty()) {
    line.push_back(' ');
    line.append(status.message());
  }
  AppendLine('-', line);
}

void ReplyWriter::AppendInteger(int64_t value) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value);
  out_->push_back(':');
  out_->append(digits, result.ptr);
  out_->append(kCrlf);
}

void ReplyWriter::AppendBulk(std::string_view bytes) {
  AppendBulkHeader(bytes.size());
  out_->append(bytes);
  out_->append(kCrlf);
}

void ReplyWriter::AppendBulkHeader(size_t length) { AppendLength('$', length); }

void ReplyWriter::AppendNull() {
  out_->append(protocol_ == Protocol::kResp3 ? std::string_view("_\r\n") : "$-1\r\n");
}

void ReplyWriter::AppendNullArray() {
  out_->append(protocol_ == Protocol::kResp3 ? std::string_view("_\r\n") : "*-1\r\n");
}

void ReplyWriter::AppendArrayHeader(size_t count) { AppendLength('*', count); }

void ReplyWriter::AppendMapHeader(size_t pairs) {
  if (protocol_ == Protocol::kResp3) {
    AppendLength('%', pairs);
  } else {
    AppendLength('*', 2 * pairs);
  }
}

void ReplyWriter::AppendSetHeader(size_t count) {
  AppendLength(protocol_ == Protocol::kResp3 ? '~' : '*', count);
}

void ReplyWriter::AppendPushHeader(size_t count) {
  AppendLength(protocol_ == Protocol::kResp3 ? '>' : '*', count);
}

void ReplyWriter::AppendDouble(double value) {
  // RESP3 spells the special values in lower case; std::to_chars agrees for inf but writes
  // "-nan" for a negative NaN, which the protocol does not know.
  char text[32];
  std::string_view formatted;
  if (std::isnan(value)) {
    formatted = "nan";
  } else if (std::isinf(value)) {
    formatted = value > 0 ? "inf" : "-inf";
  } else {
    const auto result = std::to_chars(text, text + sizeof(text), value);
    formatted = std::string_view(text, static_cast<size_t>(result.ptr - text));
  }
  if (protocol_ == Protocol::kResp3) {
    AppendLine(',', formatted);
  } else {
    AppendBulk(formatted);
  }
}

void ReplyWriter::AppendBoolean(bool value) {
  if (protocol_ == Protocol::kResp3) {
    out_->append(value ? "#t\r\n" : "#f\r\n");
  } else {
    out_->append(value ? ":1\r\n" : ":0\r\n");
  }
}

void ReplyWriter::AppendBigNumber(std::string_view digits) {
  if (protocol_ == Protocol::kResp3) {
    AppendLine('(', digits);
  } else {
    AppendBulk(digits);
  }
}

void ReplyWriter::AppendVerbatim(std::string_view text, std::string_view format) {
  if (protocol_ != Protocol::kResp3) {
    AppendBulk(text);
    return;
  }
  if (format.size() != 3 || format.find_first_of(":\r\n") != std::string_view::npos) {
    format = "txt";
  }
  AppendLength('=', text.size() + 4);
  out_->append(format);
  out_->push_back(':');
  out_->append(text);
  out_->append(kCrlf);
}

}  // namespace kvtier::resp

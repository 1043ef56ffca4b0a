#include "common/resp/status_words.h"

#include <array>
#include <string>

#include "common/resp/protocol.h"

namespace kvtier::resp {
namespace {

struct WordCode {
  std::string_view word;
  StatusCode code;
};

constexpr std::array kWords = {
    WordCode{"OK", StatusCode::kOk},
    WordCode{"NOTFOUND", StatusCode::kNotFound},
    WordCode{"EXISTS", StatusCode::kAlreadyExists},
    WordCode{"REJECTED", StatusCode::kRejected},
    WordCode{"BUSY", StatusCode::kBusy},
    WordCode{"DEVICE", StatusCode::kDeviceError},
    WordCode{"INVALID", StatusCode::kInvalidArgument},
    WordCode{"TIMEOUT", StatusCode::kTimeout},
    WordCode{"SHUTDOWN", StatusCode::kShuttingDown},
    WordCode{"NOPERM", StatusCode::kPermissionDenied},
    WordCode{"INTERNAL", StatusCode::kInternal},
    // Redis' words, which generic commands and connection errors use.
    WordCode{"ERR", StatusCode::kInvalidArgument},
    WordCode{"WRONGTYPE", StatusCode::kInvalidArgument},
    WordCode{"NOPROTO", StatusCode::kInvalidArgument},
    WordCode{"NOAUTH", StatusCode::kPermissionDenied},
    WordCode{"WRONGPASS", StatusCode::kPermissionDenied},
};

}  // namespace

std::string_view StatusWord(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NOTFOUND";
    case StatusCode::kAlreadyExists:
      return "EXISTS";
    case StatusCode::kRejected:
      return "REJECTED";
    // A client told "pending" would retry exactly as after BUSY; the daemon waits on its behalf
    // first and answers BUSY only when the wait runs out.
    case StatusCode::kBusy:
    case StatusCode::kPending:
      return "BUSY";
    case StatusCode::kDeviceError:
    case StatusCode::kChecksumMismatch:
    case StatusCode::kCorruption:
      return "DEVICE";
    case StatusCode::kInvalidArgument:
      return "INVALID";
    case StatusCode::kTimeout:
      return "TIMEOUT";
    case StatusCode::kShuttingDown:
      return "SHUTDOWN";
    case StatusCode::kPermissionDenied:
      return "NOPERM";
    case StatusCode::kInternal:
      break;
  }
  return "INTERNAL";
}

StatusCode StatusCodeFromWord(std::string_view word, bool* known) {
  const std::string upper = ToUpperAscii(word);
  for (const WordCode& entry : kWords) {
    if (entry.word == upper) {
      if (known != nullptr) *known = true;
      return entry.code;
    }
  }
  // StatusCodeName's spellings ("NOT_FOUND", "CHECKSUM_MISMATCH", ...), for logs pasted back.
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const auto code = static_cast<StatusCode>(c);
    if (StatusCodeName(code) == upper) {
      if (known != nullptr) *known = true;
      return code;
    }
  }
  if (known != nullptr) *known = false;
  return StatusCode::kInternal;
}

}  // namespace kvtier::resp

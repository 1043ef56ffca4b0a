// libFuzzer target for the RESP codec: arbitrary bytes, in arbitrary splits, into the request
// parser and the reply parser.
//
// Each input is parsed twice by each parser: once in one piece and once in pieces (and, for
// requests, partly through BulkWindow) chosen by a generator seeded from the input itself, so a
// crash reproduces from the file alone and the whole file stays meaningful RESP for the corpus.
// Both runs must agree on every command or reply and on the error. Memory held by a parser must
// follow the bytes fed, never a declared length. Every command parsed is also written back as a
// RESP3 array with ReplyWriter and must parse back to the same arguments.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp/reply_parser.h"
#include "common/resp/reply_writer.h"
#include "common/resp/request_parser.h"

namespace kvtier::resp {
namespace {

// Aborts with a message; libFuzzer reports the input that got here.
void Check(bool condition, const char* what) {
  if (!condition) {
    fprintf(stderr, "resp_fuzz: check failed: %s\n", what);
    abort();
  }
}

class Rng {
 public:
  explicit Rng(std::string_view seed) {
    for (char c : seed) state_ = (state_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    if (state_ == 0) state_ = 1;
  }
  uint64_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  // Mostly tiny pieces, where split bugs live, sometimes bigger ones.
  size_t NextChunk() { return Next() % 4 == 0 ? 1 + Next() % 256 : 1 + Next() % 4; }

 private:
  uint64_t state_ = 0xcbf29ce484222325ULL;
};

// Small limits half of the time, so that every limit path is reachable with short inputs.
template <typename Options>
Options PickLimits(Rng& rng, Options options);

template <>
RequestParser::Options PickLimits(Rng& rng, RequestParser::Options options) {
  if (rng.Next() % 2 == 0) {
    options.max_bulk_bytes = rng.Next() % 64;
    options.max_array_len = rng.Next() % 16;
    options.max_inline_bytes = rng.Next() % 64;
    options.max_command_bytes = rng.Next() % 256;
  }
  return options;
}

template <>
ReplyParser::Options PickLimits(Rng& rng, ReplyParser::Options options) {
  if (rng.Next() % 2 == 0) {
    options.max_bulk_bytes = rng.Next() % 64;
    options.max_aggregate_len = rng.Next() % 16;
    options.max_line_bytes = rng.Next() % 64;
    options.max_depth = rng.Next() % 8;
    options.max_reply_bytes = rng.Next() % 256;
  }
  return options;
}

struct RequestRun {
  std::vector<std::vector<std::string>> commands;
  std::string error;
  bool idle = false;
};

RequestRun RunRequests(std::string_view input, const RequestParser::Options& options, Rng* rng) {
  RequestParser parser(options);
  RequestRun run;
  const size_t total = input.size();
  // A payload diverted into a sink of ours (DivertBulk), as the server does with large SET
  // values: the command must come out the same once the sink is put back in its place.
  std::vector<char> sink;
  while (!input.empty()) {
    const size_t chunk = rng == nullptr ? input.size() : std::min(rng->NextChunk(), input.size());
    if (rng != nullptr && parser.pending_bulk_bytes() > 0 && !parser.bulk_diverted() &&
        parser.bulk_declared_bytes() <= total && rng->Next() % 4 == 0) {
      const size_t arrived = parser.bulk_declared_bytes() - parser.pending_bulk_bytes();
      const std::string before = parser.partial_args().back();
      Check(before.size() == arrived, "argument holds what arrived");
      std::vector<char> fresh(parser.bulk_declared_bytes());
      if (parser.DivertBulk(std::span<char>(fresh.data(), fresh.size()))) {
        Check(parser.bulk_diverted() && parser.partial_args().back().empty(), "diverted");
        Check(std::equal(before.begin(), before.end(), fresh.begin()), "divert moves what arrived");
        sink = std::move(fresh);  // a vector's move keeps its buffer, which the parser points at
      } else {
        Check(parser.partial_args().back() == before, "a refused divert changes nothing");
      }
    }
    if (rng != nullptr && parser.pending_bulk_bytes() > 0 && rng->Next() % 2 == 0) {
      std::span<char> window = parser.BulkWindow(chunk);
      Check(!window.empty() && window.size() <= chunk, "window size");
      const size_t filled = rng->Next() % (window.size() + 1);  // a short read, maybe empty
      std::memcpy(window.data(), input.data(), filled);
      parser.CommitBulk(filled);
      input.remove_prefix(filled);
      continue;
    }
    Result<size_t> used = parser.Feed(input.substr(0, chunk));
    if (!used.ok()) {
      run.error = used.status().message();
      Check(parser.failed() && !run.error.empty(), "error state");
      Check(!parser.Feed("PING\r\n").ok(), "errors are final");
      return run;
    }
    Check(*used <= chunk, "consumed more than offered");
    input.remove_prefix(*used);
    Check(parser.buffered_capacity_bytes() <= 64 * total + 8192, "request memory");
    if (parser.has_command()) {
      Command command = parser.TakeCommand();
      Check(command.size() > 0, "empty command");
      if (command.diverted_arg >= 0) {
        Check(static_cast<size_t>(command.diverted_arg) < command.size(), "diverted index");
        Check(command.args[command.diverted_arg].empty(), "diverted argument left empty");
        command.args[command.diverted_arg].assign(sink.begin(), sink.end());
      }
      run.commands.push_back(std::move(command.args));
    } else {
      Check(*used == chunk, "stopped without a command");
    }
  }
  Check(parser.consumed_bytes() == total, "consumed bytes");
  run.idle = parser.idle();
  return run;
}

struct ReplyRun {
  std::vector<Reply> replies;
  std::string error;
  bool idle = false;
};

ReplyRun RunReplies(std::string_view input, const ReplyParser::Options& options, Rng* rng) {
  ReplyParser parser(options);
  ReplyRun run;
  const size_t total = input.size();
  while (!input.empty()) {
    const size_t chunk = rng == nullptr ? input.size() : std::min(rng->NextChunk(), input.size());
    // Part of a bulk payload read in place (as NodeConnection reads large values), into room of
    // a random size that the bytes may not fill: the replies must come out the same.
    if (rng != nullptr && parser.bulk_bytes_left() > 0 && rng->Next() % 2 == 0) {
      const std::span<char> room = parser.BeginInPlace(rng->NextChunk());
      Check(room.size() <= parser.bulk_bytes_left(), "in-place room within the value");
      const size_t n = std::min(room.size(), chunk);
      std::memcpy(room.data(), input.data(), n);
      parser.CommitInPlace(n);
      input.remove_prefix(n);
      continue;
    }
    Result<size_t> used = parser.Feed(input.substr(0, chunk));
    if (!used.ok()) {
      run.error = used.status().message();
      Check(parser.failed() && !parser.Feed("+OK\r\n").ok(), "errors are final");
      return run;
    }
    Check(*used <= chunk, "consumed more than offered");
    input.remove_prefix(*used);
    Check(parser.buffered_capacity_bytes() <= 256 * total + 8192, "reply memory");
    if (parser.has_reply()) {
      run.replies.push_back(parser.TakeReply());
    } else {
      Check(*used == chunk, "stopped without a reply");
    }
  }
  Check(parser.consumed_bytes() == total, "consumed bytes");
  run.idle = parser.idle();
  return run;
}

// Replies compare through DebugString so that a NaN equals itself.
bool SameReplies(const std::vector<Reply>& a, const std::vector<Reply>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].DebugString() != b[i].DebugString()) return false;
  }
  return true;
}

// Writes each command as an array of bulk strings and checks it reads back unchanged.
void CheckCommandsRoundTrip(const std::vector<std::vector<std::string>>& commands) {
  std::string wire;
  ReplyWriter writer(&wire, Protocol::kResp3);
  for (const auto& args : commands) {
    writer.AppendArrayHeader(args.size());
    for (const std::string& arg : args) writer.AppendBulk(arg);
  }
  ReplyRun back = RunReplies(wire, ReplyParser::Options{}, nullptr);
  Check(back.error.empty() && back.replies.size() == commands.size(), "writer round trip");
  for (size_t i = 0; i < commands.size(); ++i) {
    const Reply& reply = back.replies[i];
    Check(reply.type == ReplyType::kArray && reply.elements.size() == commands[i].size(),
          "writer round trip shape");
    for (size_t j = 0; j < commands[i].size(); ++j) {
      Check(reply.elements[j].str == commands[i][j], "writer round trip bytes");
    }
  }
}

}  // namespace
}  // namespace kvtier::resp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::resp;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Rng rng(input);

  const RequestParser::Options request_options = PickLimits(rng, RequestParser::Options{});
  const RequestRun whole_request = RunRequests(input, request_options, nullptr);
  const RequestRun split_request = RunRequests(input, request_options, &rng);
  Check(whole_request.commands == split_request.commands, "request split changed the commands");
  if (whole_request.error != split_request.error) {
    fprintf(stderr, "whole: '%s'\nsplit: '%s'\n", whole_request.error.c_str(),
            split_request.error.c_str());
    Check(false, "request split changed the error");
  }
  Check(whole_request.idle == split_request.idle, "request split changed idleness");
  CheckCommandsRoundTrip(whole_request.commands);

  const ReplyParser::Options reply_options = PickLimits(rng, ReplyParser::Options{});
  const ReplyRun whole_reply = RunReplies(input, reply_options, nullptr);
  const ReplyRun split_reply = RunReplies(input, reply_options, &rng);
  Check(SameReplies(whole_reply.replies, split_reply.replies), "reply split changed the replies");
  if (whole_reply.error != split_reply.error) {
    fprintf(stderr, "whole: '%s'\nsplit: '%s'\n", whole_reply.error.c_str(),
            split_reply.error.c_str());
    Check(false, "reply split changed the error");
  }
  Check(whole_reply.idle == split_reply.idle, "reply split changed idleness");
  return 0;
}

// `kvtier explain`: block by block, whether a prompt's blocks are cached and why each missing one
// is missing (KVT.EXPLAIN, docs/protocol.md; the command is described in docs/explain.md).
//
//   kvtier explain --model M --dtype D --layers L --kv-heads H --head-dim E --block-tokens B
//                  --layout T [--revision R --tp-rank I --tp-size N --salt S]
//                  (TOKEN... | --tokens-file FILE) [--json]
//   kvtier explain --trace FILE --request N --salt S [--block-tokens B] [--json]
//
// Tokens are sent with the namespace's fields, so the daemon hashes them the way every client
// does and can name a namespace that differs in one field. A trace request's hash ids are folded
// into keys as `kvtier replay` folds them (same --salt and --block-tokens), and sent as keys.
// Exit codes: 0; 1 when the input cannot be read, the namespace is invalid, or the daemon cannot
// be reached or refuses; CLI11's codes for bad flags.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "daemon/cli/client_flags.h"
#include "daemon/cli/command.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::cli {

struct ExplainFlags {
  ClientFlags client;
  hashing::NamespaceDescriptor ns;  // from --model, --dtype, ...
  std::vector<uint32_t> tokens;     // positional
  std::string tokens_file;  // token ids separated by spaces, commas or newlines; or a JSON array
  std::string trace_path;   // a Mooncake trace, with `request`
  int64_t request = -1;     // 0-based line of the trace
  bool json = false;
};

Command AddExplainCommand(CLI::App& app);
int RunExplain(const ExplainFlags& flags, std::ostream& out, std::ostream& err);

// Token ids from text: unsigned 32-bit integers separated by white space or commas, optionally
// inside one pair of brackets (a JSON array). kInvalidArgument naming the first bad word.
Result<std::vector<uint32_t>> ParseTokenIds(std::string_view text);

}  // namespace kvtier::cli

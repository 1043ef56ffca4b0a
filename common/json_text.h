// JsonText: how kvtier turns a JSON document into text, everywhere it writes one (the daemon's
// /stats, KVT.STATS and /stats/history; every `kvtier` subcommand's --json).
//
// nlohmann's dump() throws (type_error 316) on a string that is not valid UTF-8, and the strings
// these documents carry come from outside: a namespace label a client once chose (KVT.REGISTER
// refuses such names now, but an NVMe catalog written before that check hands them back), a trace
// path, a --url. One such name must not take the statistics down for everyone, nor abort a
// command that only echoes it: invalid bytes are written as U+FFFD instead.
//
// Header-only (nlohmann is); a pure function, callable from any thread. Works for nlohmann::json
// and nlohmann::ordered_json alike.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvtier {

// `document` on one line, each byte sequence that is not valid UTF-8 replaced by U+FFFD.
template <typename Json>
std::string JsonText(const Json& document) {
  return document.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false,
                       nlohmann::json::error_handler_t::replace);
}

}  // namespace kvtier

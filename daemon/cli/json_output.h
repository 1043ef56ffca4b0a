// DumpJson: how every `kvtier` subcommand prints its --json document.
//
// nlohmann's dump() throws (type_error 316) on a string that is not valid UTF-8, and the strings a
// report carries come from outside: a trace path, a --url, a namespace field the daemon sends
// back. Printing those bytes as U+FFFD instead keeps the report valid JSON and the command from
// aborting over a name it only echoes. Header-only so that both CLI libraries share it; a pure
// function, callable from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::cli {

// `document` on one line, each byte sequence that is not valid UTF-8 replaced by U+FFFD. Works for
// nlohmann::json and nlohmann::ordered_json alike.
template <typename Json>
std::string DumpJson(const Json& document) {
  return document.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false,
                       nlohmann::json::error_handler_t::replace);
}

}  // namespace kvtier::cli

// Command: one subcommand of the `kvtier` tool.
//
// Each subcommand lives in its own file and exposes one `AddXxxCommand(CLI::App&)` that registers
// its flags on the top-level parser and returns a Command. main() parses the command line, then
// runs the Command whose parser was chosen; `run` returns the process exit code. Keeping parsing
// and running apart lets main own the exit path and lets tests call the run functions directly.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace kvtier::cli {

struct Command {
  CLI::App* parser = nullptr;  // owned by the top-level CLI::App
  std::function<int()> run;    // valid after parsing, when parser->parsed()
};

}  // namespace kvtier::cli

// Command: one subcommand of the `kvtier` tool.
//
// Each subcommand lives in its own file and exposes one `AddXxxCommand(CLI::App&)` that registers
// its flags on the top-level parser and returns a Command. main() parses the command line, then
// runs the Command whose parser was chosen; `run` returns the process exit code. Keeping parsing
// and running apart lets main own the exit path and lets tests call the run functions directly.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <ostream>

namespace kvtier::cli {

struct Command {
  CLI::App* parser = nullptr;  // owned by the top-level CLI::App
  std::function<int()> run;    // valid after parsing, when parser->parsed()
};

// Runs `command` and returns its exit code. Commands report their errors as Status; an exception
// that escapes one anyway (a bug, or a library that throws on input nobody foresaw) is printed as
// "kvtier: <what>" on `err` and gives exit code 1, where it used to abort with a core dump.
inline int RunReportingExceptions(const Command& command, std::ostream& err) {
  try {
    return command.run();
  } catch (const std::exception& e) {
    err << "kvtier: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kvtier::cli

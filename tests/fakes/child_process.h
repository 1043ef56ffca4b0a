// A child process for tests that need a second process (CUDA IPC, a client killed mid-import):
// started with posix_spawn, because fork after CUDA initialisation is not allowed, with its stdout
// readable through a pipe so that it can report what it saw one line at a time.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/fakes/helper_program.h"

namespace kvtier::testing {

struct Child {
  pid_t pid = -1;
  int out = -1;  // the read end of the child's stdout
};

// args[0] is the program's path as built; a program of that name beside the test binary comes
// first (HelperProgram).
inline Child Spawn(std::vector<std::string> args) {
  args[0] = HelperProgram(args[0]);
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  Child child;
  EXPECT_EQ(::posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  child.out = fds[0];
  return child;
}

// Waits for the child and returns its waitpid status.
inline int Wait(Child& child) {
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  ::close(child.out);
  return status;
}

// One line of the child's output, without its newline ("" at end of output).
inline std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

}  // namespace kvtier::testing

#include "daemon/cli/command.h"

#include <gtest/gtest.h>

#include <new>
#include <sstream>
#include <stdexcept>

namespace kvtier::cli {
namespace {

TEST(RunReportingExceptionsTest, PassesTheExitCodeThrough) {
  std::ostringstream err;
  EXPECT_EQ(RunReportingExceptions(Command{nullptr, [] { return 3; }}, err), 3);
  EXPECT_TRUE(err.str().empty());
}

// Regression: an exception escaping a command (nlohmann's type_error, bad_alloc) aborted the
// process; it is now a message and exit code 1.
TEST(RunReportingExceptionsTest, AnEscapedExceptionIsAMessageAndExitCodeOne) {
  std::ostringstream err;
  const Command throws{nullptr, []() -> int { throw std::runtime_error("something broke"); }};
  EXPECT_EQ(RunReportingExceptions(throws, err), 1);
  EXPECT_EQ(err.str(), "kvtier: something broke\n");

  std::ostringstream err2;
  EXPECT_EQ(RunReportingExceptions(Command{nullptr, []() -> int { throw std::bad_alloc(); }}, err2),
            1);
  EXPECT_NE(err2.str().find("kvtier: "), std::string::npos);
}

}  // namespace
}  // namespace kvtier::cli

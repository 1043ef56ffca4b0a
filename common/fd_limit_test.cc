#include "common/fd_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace kvtier {
namespace {

// Regression: kvtierd ran with the soft limit it was handed (often 1024 descriptors) although the
// hard limit allowed far more, and turned clients away with EMFILE.
TEST(FdLimitTest, TheSoftLimitIsRaisedToTheHardLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max < 128) GTEST_SKIP() << "hard limit too low to lower the soft one";
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  Result<uint64_t> raised = RaiseOpenFileLimit();
  rlimit now{};
  getrlimit(RLIMIT_NOFILE, &now);
  setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(raised.ok()) << raised.status().ToString();
  EXPECT_EQ(*raised, static_cast<uint64_t>(saved.rlim_max));
  EXPECT_EQ(now.rlim_cur, saved.rlim_max);
  // Already at the hard limit: nothing to do, and the same answer.
  Result<uint64_t> again = RaiseOpenFileLimit();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *raised);
}

}  // namespace
}  // namespace kvtier

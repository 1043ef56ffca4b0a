#include "daemon/store/read_failures.h"

#include <gtest/gtest.h>

namespace kvtier::store {
namespace {

const BlockKey kA{{1, 2}};
const BlockKey kB{{3, 4}};

TEST(ReadFailuresTest, TheSecondFailureOfTheSameCopyCounts) {
  ReadFailures f;
  EXPECT_FALSE(f.FailedAgain(kA, 4096));
  EXPECT_FALSE(f.FailedAgain(kB, 4096)) << "another key";
  EXPECT_TRUE(f.FailedAgain(kA, 4096));
  EXPECT_FALSE(f.FailedAgain(kA, 4096)) << "forgotten once it counted: the block was dropped";
  EXPECT_FALSE(f.FailedAgain(kB, 8192)) << "another copy of the key starts afresh";
  EXPECT_TRUE(f.FailedAgain(kB, 8192));
}

TEST(ReadFailuresTest, TheOldestFailuresAreForgottenPastTheBound) {
  ReadFailures f;
  EXPECT_FALSE(f.FailedAgain(kA, 0));
  for (uint64_t i = 0; i < 5000; ++i) (void)f.FailedAgain(BlockKey{{100 + i, 7}}, 0);
  EXPECT_FALSE(f.FailedAgain(kA, 0)) << "its first failure was forgotten";
  EXPECT_TRUE(f.FailedAgain(BlockKey{{100 + 4999, 7}}, 0)) << "a recent one is remembered";
}

}  // namespace
}  // namespace kvtier::store

#include "daemon/store/read_failures.h"

#include <gtest/gtest.h>

namespace kvtier::store {
namespace {

const BlockKey kA{{1, 2}};
const BlockKey kB{{3, 4}};
constexpr uint64_t kGap = ReadFailures::kMinGapUs;

TEST(ReadFailuresTest, AFailureThatLastsDropsTheBlockOnePassingDoesNot) {
  ReadFailures f;
  EXPECT_FALSE(f.FailedAgain(kA, 4096, 0));
  EXPECT_FALSE(f.FailedAgain(kA, 4096, kGap - 1)) << "within the gap: a reset may still end";
  EXPECT_FALSE(f.FailedAgain(kB, 4096, kGap)) << "another key";
  EXPECT_TRUE(f.FailedAgain(kA, 4096, kGap));
  EXPECT_FALSE(f.FailedAgain(kA, 4096, 2 * kGap)) << "forgotten once it counted: dropped";
  EXPECT_FALSE(f.FailedAgain(kB, 8192, 3 * kGap)) << "another copy of the key starts afresh";
  EXPECT_TRUE(f.FailedAgain(kB, 8192, 4 * kGap));
}

TEST(ReadFailuresTest, AReadThatSucceedsForgetsTheFailure) {
  ReadFailures f;
  f.Succeeded(kA);  // nothing remembered: nothing to do
  EXPECT_FALSE(f.FailedAgain(kA, 0, 0));
  f.Succeeded(kA);
  EXPECT_FALSE(f.FailedAgain(kA, 0, 5 * kGap)) << "a first failure again";
  EXPECT_TRUE(f.FailedAgain(kA, 0, 6 * kGap));
}

TEST(ReadFailuresTest, TheOldestFailuresAreForgottenPastTheBound) {
  ReadFailures f;
  EXPECT_FALSE(f.FailedAgain(kA, 0, 0));
  for (uint64_t i = 0; i < 5000; ++i) (void)f.FailedAgain(BlockKey{{100 + i, 7}}, 0, 0);
  EXPECT_FALSE(f.FailedAgain(kA, 0, kGap)) << "its first failure was forgotten";
  EXPECT_TRUE(f.FailedAgain(BlockKey{{100 + 4999, 7}}, 0, kGap)) << "a recent one is remembered";
}

// The bound used to erase by key: a failure forgotten early (a read that succeeded) left its key in
// the queue, and reaching the front it erased a later failure of the same key long before its turn.
TEST(ReadFailuresTest, AFailureForgottenEarlyDoesNotTakeALaterOneWithIt) {
  ReadFailures f;
  EXPECT_FALSE(f.FailedAgain(kA, 0, 0));
  f.Succeeded(kA);
  EXPECT_FALSE(f.FailedAgain(kA, 0, kGap)) << "a first failure again";
  // Enough other failures to push the first (forgotten) one out, not the second.
  for (uint64_t i = 0; i < 4095; ++i) (void)f.FailedAgain(BlockKey{{100 + i, 7}}, 0, kGap);
  EXPECT_TRUE(f.FailedAgain(kA, 0, 2 * kGap)) << "the second failure is still remembered";
}

TEST(ReadFailuresTest, AnotherCopysFailureIsRememberedAsTheNewest) {
  ReadFailures f;
  EXPECT_FALSE(f.FailedAgain(kA, 0, 0));
  for (uint64_t i = 0; i < 2000; ++i) (void)f.FailedAgain(BlockKey{{100 + i, 7}}, 0, 0);
  EXPECT_FALSE(f.FailedAgain(kA, 4096, kGap)) << "another copy: a first failure";
  // Past the bound counted from the first copy's failure, within it from the second's.
  for (uint64_t i = 0; i < 2100; ++i) (void)f.FailedAgain(BlockKey{{5000 + i, 7}}, 0, kGap);
  EXPECT_TRUE(f.FailedAgain(kA, 4096, 2 * kGap)) << "kept as recent as the copy's failure";
}

}  // namespace
}  // namespace kvtier::store

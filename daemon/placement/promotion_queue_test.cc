#include "daemon/placement/promotion_queue.h"

#include <gtest/gtest.h>

namespace kvtier::placement {
namespace {

BlockKey Key(uint64_t n) { return BlockKey{{7, n}}; }

TEST(PromotionQueueTest, CandidatesComeOutOldestFirstInBatches) {
  PromotionQueue queue(8);
  for (uint64_t n = 1; n <= 5; ++n) {
    EXPECT_EQ(queue.Push({Key(n), n * 10}), PromotionQueue::PushOutcome::kQueued);
  }
  std::vector<PromotionCandidate> batch;
  queue.PopBatch(3, batch);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].key, Key(1));
  EXPECT_EQ(batch[0].generation, 10u);
  EXPECT_EQ(batch[2].key, Key(3));
  queue.PopBatch(10, batch);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[1].key, Key(5));
  queue.PopBatch(10, batch);
  EXPECT_TRUE(batch.empty());
}

TEST(PromotionQueueTest, AKeyIsQueuedOnceUntilItIsTaken) {
  PromotionQueue queue(8);
  EXPECT_EQ(queue.Push({Key(1), 1}), PromotionQueue::PushOutcome::kQueued);
  EXPECT_EQ(queue.Push({Key(1), 1}), PromotionQueue::PushOutcome::kAlreadyQueued);
  EXPECT_EQ(queue.size(), 1u);
  std::vector<PromotionCandidate> batch;
  queue.PopBatch(1, batch);
  EXPECT_EQ(queue.Push({Key(1), 2}), PromotionQueue::PushOutcome::kQueued);
}

TEST(PromotionQueueTest, AKeyQueuedAgainTakesTheNewerGeneration) {
  // The value was replaced while its candidate waited, and the new one was read enough too.
  PromotionQueue queue(8);
  EXPECT_EQ(queue.Push({Key(1), 1}), PromotionQueue::PushOutcome::kQueued);
  EXPECT_EQ(queue.Push({Key(2), 5}), PromotionQueue::PushOutcome::kQueued);
  EXPECT_EQ(queue.Push({Key(1), 3}), PromotionQueue::PushOutcome::kAlreadyQueued);
  std::vector<PromotionCandidate> batch;
  queue.PopBatch(10, batch);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].key, Key(1));  // still in its place
  EXPECT_EQ(batch[0].generation, 3u);
  EXPECT_EQ(batch[1].generation, 5u);
}

TEST(PromotionQueueTest, ARetryDoesNotOverrideANewerRead) {
  // The mover put back a candidate of generation 1 after a read had queued generation 2.
  PromotionQueue queue(8);
  EXPECT_EQ(queue.Push({Key(1), 2}), PromotionQueue::PushOutcome::kQueued);
  EXPECT_EQ(queue.Push({Key(1), 1, /*retries=*/1}), PromotionQueue::PushOutcome::kAlreadyQueued);
  std::vector<PromotionCandidate> batch;
  queue.PopBatch(10, batch);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].generation, 2u);
}

TEST(PromotionQueueTest, AFullQueueRefusesNewCandidates) {
  PromotionQueue queue(2);
  EXPECT_EQ(queue.Push({Key(1), 1}), PromotionQueue::PushOutcome::kQueued);
  EXPECT_EQ(queue.Push({Key(2), 1}), PromotionQueue::PushOutcome::kQueued);
  EXPECT_EQ(queue.Push({Key(3), 1}), PromotionQueue::PushOutcome::kFull);
  EXPECT_EQ(queue.Push({Key(2), 1}), PromotionQueue::PushOutcome::kAlreadyQueued);
  EXPECT_EQ(queue.size(), 2u);
}

}  // namespace
}  // namespace kvtier::placement

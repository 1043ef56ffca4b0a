// HostLookup's hand-over between the caller and the lookup's thread, with a stand-in resolver.
// Timeouts and the cap on threads are tested through its users (client/resolve_test.cc,
// tiers/remote/node_connection_test.cc).
#include "common/host_lookup.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "common/testing/slow_resolver.h"

namespace kvtier {
namespace {

using kvtier::testing::HeldResolver;
using std::chrono::milliseconds;

TEST(HostLookupTest, TheAnswerIsTakenOnceAndOnAnswerRunsWithIt) {
  std::promise<void> release;
  std::atomic<int> answered{0};
  auto lookup =
      HostLookup::Start("kvtierd.example", "6380", HeldResolver(release.get_future().share()),
                        [&answered] { ++answered; });
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_FALSE((*lookup)->WaitFor(milliseconds(20)));
  EXPECT_FALSE((*lookup)->Take().has_value());
  release.set_value();
  ASSERT_TRUE((*lookup)->WaitFor(milliseconds(10'000)));
  EXPECT_EQ(answered.load(), 1);
  std::optional<HostLookup::Answer> answer = (*lookup)->Take();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->rc, 0);
  ASSERT_NE(answer->list, nullptr);
  EXPECT_EQ(answer->list->ai_socktype, SOCK_STREAM);
}

// A caller that gave up (a connection that is gone) is not called back by a late answer.
TEST(HostLookupTest, AnAbandonedLookupDoesNotCallBack) {
  std::promise<void> release;
  std::atomic<int> answered{0};
  auto lookup =
      HostLookup::Start("kvtierd.example", "6380", HeldResolver(release.get_future().share()),
                        [&answered] { ++answered; });
  ASSERT_TRUE(lookup.ok());
  (*lookup)->Abandon();
  release.set_value();
  ASSERT_TRUE((*lookup)->WaitFor(milliseconds(10'000)));
  EXPECT_EQ(answered.load(), 0);
  // Its thread is done with it once it has counted itself out.
  while (RunningResolverThreads() != 0) std::this_thread::sleep_for(milliseconds(1));
}

}  // namespace
}  // namespace kvtier

#include "daemon/server/generic_keys.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "daemon/server/generic_keys_file.h"

namespace kvtier::server {
namespace {

TEST(GlobMatchesTest, AnswersAsRedisDoes) {
  struct Case {
    std::string_view pattern, text;
    bool matches;
  };
  const Case cases[] = {
      {"*", "", true},
      {"*", "anything", true},
      {"a*", "abc", true},
      {"a*", "bac", false},
      {"*c", "abc", true},
      {"a*c*e", "abcde", true},
      {"a*c*e", "abcd", false},
      {"?", "a", true},
      {"?", "", false},
      {"h?llo", "hallo", true},
      {"h[ae]llo", "hello", true},
      {"h[ae]llo", "hillo", false},
      {"h[^e]llo", "hallo", true},
      {"h[^e]llo", "hello", false},
      {"h[a-c]llo", "hbllo", true},
      {"h[c-a]llo", "hbllo", true},  // a reversed range is taken the right way round
      {"h[a-c]llo", "hdllo", false},
      {"a\\*", "a*", true},
      {"a\\*", "ab", false},
      {"a\\?", "a?", true},
      {"[\\]]", "]", true},
      {"ab\\", "ab\\", true},
      {"**x", "x", true},
      {"k*", std::string_view("k\0z", 3), true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(GlobMatches(c.pattern, c.text), c.matches)
        << "pattern '" << c.pattern << "' text '" << c.text << "'";
  }
}

BlockKey KeyAt(uint64_t high, uint64_t low = 0) { return BlockKey{{.high = high, .low = low}}; }

void Put(GenericKeys& keys, const BlockKey& k, const std::string& name) {
  GenericKeys::Stripe& stripe = keys.StripeOf(k);
  MutexLock lock(stripe.lock);
  keys.Record(stripe, k, name, 0);
}

std::vector<std::string> WalkAll(GenericKeys& keys, size_t budget, size_t* calls) {
  std::vector<std::string> seen;
  uint64_t cursor = 0;
  *calls = 0;
  do {
    ++*calls;
    cursor = keys.Walk(cursor, budget,
                       [&](GenericKeys::Stripe&, const BlockKey&, GenericKeys::Entry& e) {
                         seen.push_back(e.name);
                         return true;
                       });
  } while (cursor != 0 && *calls < 10'000);
  return seen;
}

TEST(GenericKeysWalkTest, VisitsEveryEntryOnceInStepsAcrossStripes) {
  GenericKeys keys;
  std::set<std::string> names;
  for (uint64_t i = 0; i < 300; ++i) {
    // Spread over every stripe: the top bits pick the stripe.
    const std::string name = "k" + std::to_string(i);
    Put(keys, KeyAt(i * 0x00DA'0000'0000'0001ULL + 7), name);
    names.insert(name);
  }
  EXPECT_EQ(keys.size(), 300u);
  size_t calls = 0;
  const std::vector<std::string> seen = WalkAll(keys, 7, &calls);
  EXPECT_EQ(seen.size(), 300u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), names);
  EXPECT_GE(calls, 300u / 7);
}

TEST(GenericKeysWalkTest, NeverSplitsTheEntriesOfOneCursorValue) {
  GenericKeys keys;
  Put(keys, KeyAt(5, 1), "a");
  Put(keys, KeyAt(5, 2), "b");
  Put(keys, KeyAt(5, 3), "c");
  Put(keys, KeyAt(9, 0), "d");
  std::vector<std::string> first;
  const uint64_t next =
      keys.Walk(0, 1, [&](GenericKeys::Stripe&, const BlockKey&, GenericKeys::Entry& e) {
        first.push_back(e.name);
        return true;
      });
  EXPECT_EQ(first, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(next, 9u);
}

TEST(GenericKeysWalkTest, AVisitorDropsEntries) {
  GenericKeys keys;
  for (uint64_t i = 1; i <= 10; ++i) Put(keys, KeyAt(i << 58 | i), "k" + std::to_string(i));
  (void)keys.Walk(0, SIZE_MAX, [](GenericKeys::Stripe&, const BlockKey& k, GenericKeys::Entry&) {
    return (k.high & 1) == 0;  // keep the even ones
  });
  EXPECT_EQ(keys.size(), 5u);
  size_t calls = 0;
  EXPECT_EQ(WalkAll(keys, 100, &calls).size(), 5u);
}

class GenericKeysFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-keys-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "generic-keys").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(GenericKeysFileTest, NamesAndExpiryComeBackAndTheFileIsReadOnce) {
  GenericKeys saved;
  {
    GenericKeys::Stripe& a = saved.StripeOf(KeyAt(1, 2));
    MutexLock lock(a.lock);
    saved.Record(a, KeyAt(1, 2), std::string("bin\0ary", 7), 1234);
  }
  Put(saved, KeyAt(7ULL << 58, 9), "plain");
  ASSERT_EQ(SaveGenericKeys(saved, path_).value(), 2u);

  GenericKeys loaded;
  ASSERT_EQ(LoadGenericKeys(loaded, path_).value(), 2u);
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_EQ(loaded.size(), 2u);
  GenericKeys::Stripe& a = loaded.StripeOf(KeyAt(1, 2));
  MutexLock lock(a.lock);
  const GenericKeys::Entry* e = loaded.Find(a, KeyAt(1, 2));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name, std::string("bin\0ary", 7));
  EXPECT_EQ(e->expires_at_ms, 1234u);
  EXPECT_EQ(LoadGenericKeys(loaded, path_).value(), 0u);  // no file: nothing, no error
}

TEST_F(GenericKeysFileTest, ADamagedFileIsRefusedWholeAndRemoved) {
  GenericKeys saved;
  for (uint64_t i = 0; i < 10; ++i) Put(saved, KeyAt(i << 58), "k" + std::to_string(i));
  ASSERT_TRUE(SaveGenericKeys(saved, path_).ok());
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('X');
  }
  GenericKeys loaded;
  const Result<size_t> r = LoadGenericKeys(loaded, path_);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_EQ(loaded.size(), 0u);
  EXPECT_FALSE(std::filesystem::exists(path_));
  std::ofstream(path_) << "not a key-names file";
  EXPECT_EQ(LoadGenericKeys(loaded, path_).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace kvtier::server

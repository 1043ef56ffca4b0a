#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier {
namespace {

TEST(Utf8Test, AcceptsWellFormedTextOfEveryLength) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("meta-llama/Llama-3.1-8B"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9"));           // U+00E9
  EXPECT_TRUE(IsValidUtf8("\xE2\x82\xAC"));          // U+20AC
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));          // U+D7FF, just below the surrogates
  EXPECT_TRUE(IsValidUtf8("\xEE\x80\x80"));          // U+E000, just above them
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\xA6\x99"));      // U+1F999
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));      // U+10FFFF, the last code point
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is a character like any other
}

TEST(Utf8Test, RejectsOverlongForms) {
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));  // '/' in two bytes
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // '/' in three bytes
  EXPECT_FALSE(IsValidUtf8("\xE0\x9F\xBF"));      // U+07FF in three bytes
  EXPECT_FALSE(IsValidUtf8("\xF0\x80\x80\xAF"));  // '/' in four bytes
  EXPECT_FALSE(IsValidUtf8("\xF0\x8F\xBF\xBF"));  // U+FFFF in four bytes
}

TEST(Utf8Test, RejectsSurrogatesAndCodePointsBeyondUnicode) {
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // U+D800
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));      // U+DFFF
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(Utf8Test, RejectsTruncatedAndStrayBytes) {
  EXPECT_FALSE(IsValidUtf8("\xC3"));  // a lead at the end
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\xA6"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82x"));  // cut short by an ASCII byte
  EXPECT_FALSE(IsValidUtf8("\x80"));       // a continuation byte without a lead
  EXPECT_FALSE(IsValidUtf8("model\xA9"));
}

TEST(Utf8Test, ReplacementKeepsValidTextAndMarksEachBadSequenceOnce) {
  EXPECT_EQ(ReplaceInvalidUtf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(ReplaceInvalidUtf8("a\xFF"
                               "b"),
            "a\xEF\xBF\xBD"
            "b");
  // A truncated sequence is one replacement, then the byte that cut it short is kept.
  EXPECT_EQ(ReplaceInvalidUtf8("\xE2\x82x"), "\xEF\xBF\xBDx");
  // A surrogate's lead has no valid continuation: each of its three bytes is replaced.
  EXPECT_EQ(ReplaceInvalidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(ReplaceInvalidUtf8("\xC0\xAF\xF4\x90\x80\x80\xF0\x9F\xA6")));
}

}  // namespace
}  // namespace kvtier

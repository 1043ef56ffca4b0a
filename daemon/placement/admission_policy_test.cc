#include "daemon/placement/admission_policy.h"

#include <gtest/gtest.h>

namespace kvtier::placement {
namespace {

TEST(AdmissionPolicyTest, AllAdmitsEverything) {
  auto policy = MakeAdmissionPolicy("all");
  ASSERT_TRUE(policy.ok());
  index::BlockMeta meta;
  EXPECT_TRUE((*policy)->Admit(meta));
}

TEST(AdmissionPolicyTest, ReusedAdmitsOnlyBlocksReadAfterTheirPut) {
  auto policy = MakeAdmissionPolicy("reused");
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ((*policy)->name(), "reused");
  index::BlockMeta meta;
  EXPECT_FALSE((*policy)->Admit(meta));
  meta.reads = 1;
  EXPECT_TRUE((*policy)->Admit(meta));
}

TEST(AdmissionPolicyTest, UnknownNameIsAClearError) {
  auto policy = MakeAdmissionPolicy("twice");
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(policy.status().message().find("known: all, reused"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::placement

#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument("odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  KVTIER_ASSIGN_OR_RETURN(int h, Half(v));
  return Half(h);
}

TEST(StatusTest, OkAndErrorsPrintTheirCode) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status busy = Busy("host tier is full");
  EXPECT_FALSE(busy.ok());
  EXPECT_EQ(busy.code(), StatusCode::kBusy);
  EXPECT_EQ(busy.ToString(), "BUSY: host tier is full");
}

TEST(StatusTest, ResultCarriesValueOrError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, ResultFromOkStatusIsAnInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, ErrnoIsTranslatedOnce) {
  EXPECT_EQ(ErrnoStatus(ENOENT, "open x").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "write").code(), StatusCode::kBusy);
  EXPECT_EQ(ErrnoStatus(EIO, "read").code(), StatusCode::kDeviceError);
  EXPECT_NE(ErrnoStatus(EIO, "read blocks.dat").message().find("read blocks.dat"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier

#include "common/paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvtier {
namespace {

class PrivateDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/kvtier-paths-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    root_ = name;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string Dir(const std::string& name, mode_t mode) {
    const std::string dir = root_ + "/" + name;
    EXPECT_EQ(::mkdir(dir.c_str(), 0700), 0);
    EXPECT_EQ(::chmod(dir.c_str(), mode), 0);
    return dir;
  }
  std::string root_;
};

TEST_F(PrivateDirectoryTest, AcceptsOnlyAnOwnDirectoryNoOneElseWrites) {
  EXPECT_TRUE(CheckPrivateDirectory(Dir("private", 0700)).ok());
  EXPECT_TRUE(CheckPrivateDirectory(Dir("readable", 0755)).ok());
  for (mode_t open_to_others : {0775, 0777, 01777}) {
    const Status st =
        CheckPrivateDirectory(Dir("open" + std::to_string(open_to_others), open_to_others));
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
    EXPECT_NE(st.message().find("may be written by other users"), std::string::npos);
  }
}

TEST_F(PrivateDirectoryTest, RefusesALinkAFileAndAnotherUsersDirectory) {
  const std::string target = Dir("target", 0700);
  const std::string link = root_ + "/link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(CheckPrivateDirectory(link).code(), StatusCode::kPermissionDenied);
  const std::string file = root_ + "/file";
  std::ofstream(file) << "x";
  EXPECT_EQ(CheckPrivateDirectory(file).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckPrivateDirectory(root_ + "/missing").code(), StatusCode::kNotFound);
  const std::string theirs = Dir("theirs", 0700);
  if (::chown(theirs.c_str(), ::geteuid() + 1, static_cast<gid_t>(-1)) != 0) {
    GTEST_SKIP() << "giving a directory to another user needs root";
  }
  const Status st = CheckPrivateDirectory(theirs);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("not to this user"), std::string::npos) << st.ToString();
}

TEST(TmpFallbackDirTest, NamesPathsInsideItOnly) {
  const std::string dir = TmpFallbackDir();
  EXPECT_TRUE(InTmpFallbackDir(dir + "/kvtierd.sock"));
  EXPECT_FALSE(InTmpFallbackDir(dir + "0/kvtierd.sock"));
  EXPECT_FALSE(InTmpFallbackDir("/run/kvtier/kvtierd.sock"));
}

}  // namespace
}  // namespace kvtier

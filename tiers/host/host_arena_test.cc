#include "tiers/host/host_arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace kvtier::tiers {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::unique_ptr<HostArena> MakeArena(uint64_t bytes, bool huge = true, bool lock = true) {
  Result<std::unique_ptr<HostArena>> arena = HostArena::Create(
      {.capacity_bytes = bytes, .name = "arena-test", .try_huge_pages = huge, .try_mlock = lock});
  EXPECT_TRUE(arena.ok()) << arena.status().ToString();
  return arena.ok() ? std::move(arena).value() : nullptr;
}

TEST(HostArenaTest, MappingIsWritableAndSized) {
  std::unique_ptr<HostArena> arena = MakeArena(4 * kMiB);
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(arena->size(), 4 * kMiB);
  std::memset(arena->base(), 0xab, arena->size());
  EXPECT_EQ(arena->base()[0], std::byte{0xab});
  EXPECT_EQ(arena->base()[arena->size() - 1], std::byte{0xab});
}

TEST(HostArenaTest, FdIsValidCloseOnExecAndSized) {
  std::unique_ptr<HostArena> arena = MakeArena(3 * kMiB + 4096);
  ASSERT_NE(arena, nullptr);
  const int flags = fcntl(arena->fd(), F_GETFD);
  ASSERT_GE(flags, 0);
  EXPECT_TRUE(flags & FD_CLOEXEC);
  struct stat st {};
  ASSERT_EQ(fstat(arena->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), arena->size());
  EXPECT_FALSE(arena->huge_pages());  // not a multiple of 2 MiB: never tried
}

// What a client does with the fd it receives over the Unix socket.
TEST(HostArenaTest, SecondMappingOfFdSeesTheSameBytes) {
  std::unique_ptr<HostArena> arena = MakeArena(2 * kMiB);
  ASSERT_NE(arena, nullptr);
  void* mapped = mmap(nullptr, arena->size(), PROT_READ | PROT_WRITE, MAP_SHARED, arena->fd(), 0);
  ASSERT_NE(mapped, MAP_FAILED) << std::strerror(errno);
  auto* client = static_cast<std::byte*>(mapped);

  std::memcpy(arena->base() + 12345, "daemon", 6);
  EXPECT_EQ(std::memcmp(client + 12345, "daemon", 6), 0);
  std::memcpy(client + arena->size() - 6, "client", 6);
  EXPECT_EQ(std::memcmp(arena->base() + arena->size() - 6, "client", 6), 0);
  ASSERT_EQ(munmap(mapped, arena->size()), 0);
}

TEST(HostArenaTest, SealedArenaCannotBeResizedThroughItsFd) {
  std::unique_ptr<HostArena> arena = MakeArena(kMiB);
  ASSERT_NE(arena, nullptr);
  if (!arena->sealed()) GTEST_SKIP() << "kernel refused memfd seals";
  EXPECT_NE(ftruncate(arena->fd(), 4096), 0);
  EXPECT_NE(ftruncate(arena->fd(), 2 * kMiB), 0);
  EXPECT_EQ(arena->size(), kMiB);
}

TEST(HostArenaTest, BestEffortFeaturesOffWhenNotAsked) {
  std::unique_ptr<HostArena> arena = MakeArena(2 * kMiB, /*huge=*/false, /*lock=*/false);
  ASSERT_NE(arena, nullptr);
  EXPECT_FALSE(arena->huge_pages());
  EXPECT_FALSE(arena->thp_advised());
  EXPECT_FALSE(arena->locked());
  EXPECT_TRUE(arena->lock_status().ok());
}

TEST(HostArenaTest, LockOutcomeIsRecorded) {
  std::unique_ptr<HostArena> arena = MakeArena(kMiB, /*huge=*/false, /*lock=*/true);
  ASSERT_NE(arena, nullptr);
  // Either outcome is legal (RLIMIT_MEMLOCK decides); the two accessors must agree.
  EXPECT_EQ(arena->locked(), arena->lock_status().ok()) << arena->lock_status().ToString();
}

TEST(HostArenaTest, ZeroCapacityIsInvalid) {
  EXPECT_EQ(HostArena::Create({.capacity_bytes = 0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(HostArenaTest, DestructorClosesTheFd) {
  std::unique_ptr<HostArena> arena = MakeArena(kMiB);
  ASSERT_NE(arena, nullptr);
  const int fd = arena->fd();
  arena.reset();
  errno = 0;
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace kvtier::tiers

// core/shared_memory.h: a region made in one process, opened by path in another (fork), and
// every way a path can fail to be one.
#include "core/shared_memory.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SharedMemoryTest, AnotherProcessMapsAPartByPathAndBothSeeTheSameBytes) {
  constexpr uint64_t kBytes = 3 * 4096 + 100;
  absl::StatusOr<SharedMemory> region = SharedMemory::Create("test", kBytes);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ(region->size(), kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) region->data()[i] = static_cast<char>(i % 251);
  const std::string path = region->path();
  ASSERT_THAT(path, HasSubstr("/proc/"));

  // The child maps bytes [5000, 5100) (not page-aligned), checks them, and overwrites them.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<SharedMemory> part = SharedMemory::Open(path, 5000, 100);
    if (!part.ok() || part->size() != 100) _exit(2);
    for (uint64_t i = 0; i < 100; ++i) {
      if (part->data()[i] != static_cast<char>((5000 + i) % 251)) _exit(3);
    }
    std::memset(part->data(), 0x7f, 100);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(region->data()[4999], static_cast<char>(4999 % 251));
  EXPECT_EQ(region->data()[5000], 0x7f);
  EXPECT_EQ(region->data()[5099], 0x7f);
  EXPECT_EQ(region->data()[5100], static_cast<char>(5100 % 251));
}

TEST(SharedMemoryTest, NoOpenerCanResizeIt) {
  absl::StatusOr<SharedMemory> region = SharedMemory::Create("sealed", 8192);
  ASSERT_TRUE(region.ok()) << region.status();
  const int fd = open(region->path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_NE(ftruncate(fd, 10), 0);
  EXPECT_NE(ftruncate(fd, 1 << 20), 0);
  close(fd);
  EXPECT_EQ(region->data()[8191], 0);  // still mapped, still whole
}

TEST(SharedMemoryTest, OpenRefusesWhatIsNotASealedRegionHoldingTheRange) {
  absl::StatusOr<SharedMemory> region = SharedMemory::Create("small", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_THAT(SharedMemory::Open(region->path(), 4000, 97).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[4000, 4097)")));
  EXPECT_THAT(SharedMemory::Open(region->path(), 0, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // A plain file could be truncated under the mapping, and opening a device or a FIFO could
  // disturb it: only a descriptor's path is opened, and only a sealed one is mapped.
  const std::string plain = std::filesystem::path(::testing::TempDir()) / "plain";
  std::ofstream(plain) << std::string(8192, 'x');
  EXPECT_THAT(SharedMemory::Open(plain, 0, 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("/proc/PID/fd/FD")));
  for (const char* path :
       {"/dev/zero", "/proc/self/mem", "/proc/1/fd/../environ", "/proc/1/fd/x", "proc/1/fd/3"}) {
    EXPECT_THAT(SharedMemory::Open(path, 0, 16).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path)));
  }
  const int fd = open(plain.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_THAT(SharedMemory::Open(absl::StrCat("/proc/", getpid(), "/fd/", fd), 0, 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sealed")));
  close(fd);
  const std::string closed = absl::StrCat("/proc/", getpid(), "/fd/99999");
  EXPECT_THAT(SharedMemory::Open(closed, 0, 16).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(closed)));
  EXPECT_THAT(SharedMemory::Create("empty", 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SharedMemoryTest, AMovedRegionStaysMappedOnce) {
  absl::StatusOr<SharedMemory> region = SharedMemory::Create("moved", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  region->data()[0] = 42;
  SharedMemory moved = std::move(*region);
  EXPECT_EQ(moved.data()[0], 42);
  EXPECT_EQ(region->data(), nullptr);
  EXPECT_TRUE(region->path().empty());
  SharedMemory assigned = std::move(moved);
  EXPECT_EQ(assigned.data()[0], 42);
  EXPECT_EQ(assigned.size(), 4096u);
}

}  // namespace
}  // namespace tessera

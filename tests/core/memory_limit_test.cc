// AvailableMemoryBytes: physical memory capped by a cgroup v2 limit; memory.max lines parse
// as the kernel writes them.
#include "core/memory_limit.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(MemoryLimitTest, CgroupMemoryMaxLines) {
  EXPECT_EQ(BytesFromCgroupMemoryMax("max\n"), std::nullopt);
  EXPECT_EQ(BytesFromCgroupMemoryMax("2147483648\n"), uint64_t{2147483648});
  EXPECT_EQ(BytesFromCgroupMemoryMax("4096"), uint64_t{4096});
  EXPECT_EQ(BytesFromCgroupMemoryMax(""), std::nullopt);
  EXPECT_EQ(BytesFromCgroupMemoryMax("-1"), std::nullopt);
  EXPECT_EQ(BytesFromCgroupMemoryMax("12 34"), std::nullopt);
}

TEST(MemoryLimitTest, NoMoreThanThePhysicalMemory) {
  const uint64_t physical =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(AvailableMemoryBytes(), 0u);
  EXPECT_LE(AvailableMemoryBytes(), physical);
}

}  // namespace
}  // namespace tessera

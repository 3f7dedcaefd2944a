// AvailableCpus and AffinityCpuIds: the affinity mask and a cgroup v2 quota bound it; cpu.max lines
// parse as the kernel writes them.
#include "core/cpu_count.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(CpuCountTest, CgroupCpuMaxLines) {
  EXPECT_EQ(CpusFromCgroupCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CpusFromCgroupCpuMax("150000 100000"), 2);  // 1.5 CPUs: round up
  EXPECT_EQ(CpusFromCgroupCpuMax("50000 100000"), 1);
  EXPECT_EQ(CpusFromCgroupCpuMax(""), std::nullopt);
  EXPECT_EQ(CpusFromCgroupCpuMax("-1 100000"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupCpuMax("100000 0"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupCpuMax("100000"), std::nullopt);
}

TEST(CpuCountTest, AProcessPinnedToOneCpuCountsOne) {
  // In a child, before anything there has asked (the count is computed once).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(100);
    _exit(AvailableCpus());
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

// The ids taskset would take: pinned to one CPU, exactly that one.
TEST(CpuCountTest, AffinityCpuIdsAreTheMask) {
  const std::vector<int> ids = AffinityCpuIds();
  ASSERT_FALSE(ids.empty());
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_LE(AvailableCpus(), static_cast<int>(ids.size()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int cpu = ids.back();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(100);
    _exit(AffinityCpuIds() == std::vector<int>{cpu} ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(CpuCountTest, NeverMoreThanTheMachineHas) {
  EXPECT_GE(AvailableCpus(), 1);
  EXPECT_LE(AvailableCpus(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace tessera

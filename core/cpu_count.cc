#include "core/cpu_count.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// The quota of the cgroup this process is in, as its own namespace shows it (inside a
// container, the container's cgroup is the root).
std::optional<int> CgroupCpus() {
  std::ifstream file("/sys/fs/cgroup/cpu.max");
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  return CpusFromCgroupCpuMax(line);
}

}  // namespace

std::optional<int> CpusFromCgroupCpuMax(absl::string_view cpu_max) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(cpu_max, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &quota) ||
      !absl::SimpleAtoi(fields[1], &period) || quota <= 0 || period <= 0) {
    return std::nullopt;  // "max ..." (no limit) or unreadable
  }
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

int AvailableCpus() {
  static const int cpus = [] {
    const int affinity = AffinityCpus();
    const std::optional<int> quota = CgroupCpus();
    return quota ? std::min(affinity, *quota) : affinity;
  }();
  return cpus;
}

}  // namespace tessera

#include "core/cpu_count.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/cgroup_file.h"

namespace tessera {
namespace {

int AffinityCpus() {
  const std::vector<int> ids = AffinityCpuIds();
  if (!ids.empty()) return static_cast<int>(ids.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

std::optional<int> CgroupCpus() {
  const std::optional<std::string> line = ReadOwnCgroupFile("cpu.max");
  return line ? CpusFromCgroupCpuMax(*line) : std::nullopt;
}

}  // namespace

std::vector<int> AffinityCpuIds() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> ids;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return ids;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) ids.push_back(cpu);
  }
  return ids;
}

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

// The CPUs this process may really use: its affinity mask, capped by a cgroup v2 CPU quota
// (a container's `cpu.max`). std::thread::hardware_concurrency() counts the host's cores, so
// a process pinned to 2 cores of 16, or a pod limited to 2 CPUs, would start 16 threads'
// worth of work and oversubscribe.
#ifndef TESSERA_CORE_CPU_COUNT_H_
#define TESSERA_CORE_CPU_COUNT_H_

#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera {

// At least 1.
int AvailableCpus();

// The ids of the CPUs in this process's affinity mask (taskset's numbering), in order;
// empty when it cannot be read.
std::vector<int> AffinityCpuIds();

// The CPUs a cgroup v2 `cpu.max` line grants ("max 100000": no limit; "150000 100000":
// 2, rounded up); nullopt for no limit or a line that is not of that form.
std::optional<int> CpusFromCgroupCpuMax(absl::string_view cpu_max);

}  // namespace tessera

#endif  // TESSERA_CORE_CPU_COUNT_H_

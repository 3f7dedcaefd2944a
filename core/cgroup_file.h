// The cgroup v2 interface files of the cgroup this process is in, as its own namespace shows
// them: inside a container the container's cgroup is the root, so /sys/fs/cgroup/cpu.max is
// the container's quota. What core/cpu_count and core/memory_limit read their limits from.
#ifndef TESSERA_CORE_CGROUP_FILE_H_
#define TESSERA_CORE_CGROUP_FILE_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

// The first line of interface file `name` (e.g. "cpu.max"); nullopt when it cannot be read
// (cgroup v1, or no such controller).
std::optional<std::string> ReadOwnCgroupFile(absl::string_view name);

}  // namespace tessera

#endif  // TESSERA_CORE_CGROUP_FILE_H_

// The memory this process may really use: the machine's physical memory, capped by a
// cgroup v2 limit (a container's `memory.max`). A daemon checks what a remote request would
// allocate against it before allocating, instead of finding out from the kernel's OOM killer.
#ifndef TESSERA_CORE_MEMORY_LIMIT_H_
#define TESSERA_CORE_MEMORY_LIMIT_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace tessera {

// In bytes; at least one page.
uint64_t AvailableMemoryBytes();

// The bytes a cgroup v2 `memory.max` line grants; nullopt for "max" (no limit) or a line
// that is not a byte count.
std::optional<uint64_t> BytesFromCgroupMemoryMax(absl::string_view memory_max);

}  // namespace tessera

#endif  // TESSERA_CORE_MEMORY_LIMIT_H_

#include "core/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace tessera {
namespace {

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// The limit of the cgroup this process is in, as its own namespace shows it (inside a
// container, the container's cgroup is the root), as core/cpu_count.cc reads cpu.max.
std::optional<uint64_t> CgroupMemoryBytes() {
  std::ifstream file("/sys/fs/cgroup/memory.max");
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  return BytesFromCgroupMemoryMax(line);
}

}  // namespace

std::optional<uint64_t> BytesFromCgroupMemoryMax(absl::string_view memory_max) {
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(memory_max), &bytes)) return std::nullopt;
  return bytes;
}

uint64_t AvailableMemoryBytes() {
  static const uint64_t bytes = [] {
    uint64_t limit = PhysicalMemoryBytes();
    if (std::optional<uint64_t> cgroup = CgroupMemoryBytes()) limit = std::min(limit, *cgroup);
    return std::max<uint64_t>(limit, static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  }();
  return bytes;
}

}  // namespace tessera

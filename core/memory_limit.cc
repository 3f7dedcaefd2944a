#include "core/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "core/cgroup_file.h"

namespace tessera {
namespace {

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

std::optional<uint64_t> CgroupMemoryBytes() {
  const std::optional<std::string> line = ReadOwnCgroupFile("memory.max");
  return line ? BytesFromCgroupMemoryMax(*line) : std::nullopt;
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

#include "core/cgroup_file.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessera {

std::optional<std::string> ReadOwnCgroupFile(absl::string_view name) {
  std::ifstream file(absl::StrCat("/sys/fs/cgroup/", name));
  std::string line;
  if (!file || !std::getline(file, line)) return std::nullopt;
  return line;
}

}  // namespace tessera

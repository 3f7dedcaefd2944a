#include "bench/machine.h"

#include <fstream>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tessera::bench {
namespace {

// The value of the first /proc/cpuinfo line whose key is `key`, or "".
std::string CpuInfoField(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, key)) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

}  // namespace

std::string CpuModel() {
  const std::string model = CpuInfoField("model name");
  return model.empty() ? "unknown" : model;
}

std::string CpuIsa() {
  const std::string flags = CpuInfoField("flags");
  const std::set<std::string> has = absl::StrSplit(flags, ' ', absl::SkipEmpty());
  if (has.count("avx512f")) return "AVX-512";
  if (has.count("avx2")) return "AVX2";
  if (has.count("avx")) return "AVX";
  if (has.count("sse4_1")) return "SSE4.1";
  return "unknown";
}

}  // namespace tessera::bench

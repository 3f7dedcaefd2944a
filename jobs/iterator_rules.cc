#include "jobs/iterator_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::jobs {
namespace {

struct SetArgument {
  const char* name;
  const char* from;  // what sets it, for the message
  bool test_only;
};
constexpr SetArgument kSetArguments[] = {
    {"batch_size", "batch_size", false},
    {"seed", "seed", false},
    {"shuffle", "data.shuffle", false},
    {"part_index", "each worker reads its own part", false},
    {"num_parts", "each worker reads its own part", false},
    // CSVIter refuses round_batch beside last_batch_handle, which the test iterator gets.
    {"last_batch_handle", "the test iterator pads its last batch so every sample counts once", true},
    {"round_batch", "the test iterator pads its last batch so every sample counts once", true},
};

}  // namespace

io::IterKwargs JobSetIterArguments(const JobSpec& spec, bool test) {
  const DataSpec& d = spec.data();
  if (test) {
    return {{"batch_size", absl::StrCat(spec.batch_size())},
            {"seed", absl::StrCat(spec.seed())},
            {"shuffle", "0"},
            {"part_index", "0"},
            {"num_parts", "1"},
            {"last_batch_handle", "pad"}};
  }
  return {{"batch_size", absl::StrCat(spec.batch_size())},
          {"seed", absl::StrCat(spec.seed())},
          {"shuffle", d.shuffle() ? "1" : "0"},
          {"part_index", absl::StrCat(d.part_index())},
          {"num_parts", absl::StrCat(std::max(1, d.num_parts()))}};
}

std::optional<std::string> JobSetsIterArgument(absl::string_view key, bool test) {
  for (const SetArgument& a : kSetArguments) {
    if (key == a.name && (test || !a.test_only)) return absl::StrCat("the job sets it (", a.from, ")");
  }
  return std::nullopt;
}

}  // namespace tessera::jobs

#include "jobs/recovery_policy.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace tessera::jobs {

RecoveryPolicy RecoveryPolicyOf(const JobSpec& spec) {
  RecoveryPolicy policy;
  const int given = spec.recovery().max_restarts();
  if (given != 0) policy.max_restarts = std::max(0, given);
  if (spec.recovery().wait_seconds() > 0) policy.wait = absl::Seconds(spec.recovery().wait_seconds());
  policy.replace_workers =
      absl::StartsWith(spec.kvstore(), "dist_") &&
      (!spec.recovery().has_replace_workers() || spec.recovery().replace_workers());
  return policy;
}

bool IsLostProcess(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsAborted(status) ||
         absl::IsDeadlineExceeded(status);
}

}  // namespace tessera::jobs

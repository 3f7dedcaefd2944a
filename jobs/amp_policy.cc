#include "jobs/amp_policy.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "jobs/job_spec_check.h"

namespace tessera::jobs {

absl::StatusOr<std::optional<graph::AmpOptions>> AmpOptionsOf(const JobSpec& spec) {
  if (!spec.has_amp()) return std::nullopt;
  const AmpPolicy& amp = spec.amp();
  graph::AmpOptions options;
  if (amp.dtype() == "bfloat16") {
    options.dtype = DType::kBFloat16;
  } else if (amp.dtype() == "float16") {
    options.dtype = DType::kFloat16;
  } else {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "amp.dtype",
                         absl::StrCat("'", amp.dtype(), "' is not bfloat16 or float16"));
  }
  // float16 scales dynamically unless told otherwise; bfloat16 has float32's range.
  const bool dynamic = amp.loss_scale() == "dynamic" ||
                       (amp.loss_scale().empty() && options.dtype == DType::kFloat16);
  if (dynamic) {
    const std::string store = spec.kvstore().empty() ? "local" : spec.kvstore();
    if (store != "local" || spec.devices_size() > 1) {
      return JobFieldError(
          absl::StatusCode::kInvalidArgument, "amp.loss_scale",
          absl::StrCat("dynamic loss scaling (float16's default) is only for one device without parameter "
                       "servers; this job has kvstore '", store, "' and ", std::max(1, spec.devices_size()),
                       " devices: give a static scale (loss_scale: 1024), or use bfloat16"));
    }
    if (spec.check_finite()) {
      return JobFieldError(absl::StatusCode::kInvalidArgument, "amp.loss_scale",
                           "dynamic loss scaling skips the steps with NaN or infinite gradients; "
                           "check_finite would fail the job on them: drop one");
    }
    options.dynamic_loss_scale = true;
  } else if (!amp.loss_scale().empty()) {
    double scale = 0;
    if (!absl::SimpleAtod(amp.loss_scale(), &scale) || !(scale > 0) || !std::isfinite(scale)) {
      return JobFieldError(absl::StatusCode::kInvalidArgument, "amp.loss_scale",
                           absl::StrCat("'", amp.loss_scale(), "' is not a positive number"));
    }
    options.loss_scale = scale;
  }
  return options;
}

}  // namespace tessera::jobs

#include "jobs/amp_policy.h"

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
  if (amp.loss_scale() == "dynamic") {
    return JobFieldError(absl::StatusCode::kUnimplemented, "amp.loss_scale",
                         "dynamic loss scaling is not built yet; give a static scale (a number, "
                         "e.g. 1024), or use bfloat16, which needs none");
  }
  if (!amp.loss_scale().empty()) {
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

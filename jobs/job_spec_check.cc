#include "jobs/job_spec_check.h"

#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "io/create_data_iter.h"
#include "jobs/amp_policy.h"
#include "jobs/iterator_rules.h"
#include "kvstore/internal/compression.h"
#include "kvstore/kvstore.h"

namespace tessera::jobs {
namespace {

// The arguments a job gives an iterator (at `field`): none the job sets itself, each one
// the iterator takes.
absl::Status CheckIterArguments(const std::string& iter_name, const std::string& field,
                                const google::protobuf::Map<std::string, std::string>& given,
                                bool test) {
  for (const auto& [key, value] : given) {
    const std::string key_field = absl::StrCat(field, ".", key);
    if (std::optional<std::string> set = JobSetsIterArgument(key, test)) {
      return JobFieldError(absl::StatusCode::kInvalidArgument, key_field, *set);
    }
    if (absl::Status alone = io::CheckDataIterKwargs(iter_name, {{key, value}}); !alone.ok()) {
      return JobFieldError(absl::StatusCode::kInvalidArgument, key_field, alone.message());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobFieldError(absl::StatusCode code, absl::string_view field, absl::string_view what) {
  return absl::Status(code, absl::StrCat("job field '", field, "': ", what));
}

absl::Status CheckJobSpec(const JobSpec& spec) {
  if (spec.version() > kJobSpecVersion) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "version",
                         absl::StrCat(spec.version(), " is newer than this build's ", kJobSpecVersion));
  }
  if (spec.batch_size() < 1) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "batch_size", "must be >= 1");
  }
  if (spec.num_epochs() < 1) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "num_epochs", "must be >= 1");
  }
  const std::string store = spec.kvstore().empty() ? "local" : spec.kvstore();
  if (absl::Status known = kvstore::ParseKVStoreType(store).status(); !known.ok()) {
    return JobFieldError(known.code(), "kvstore", known.message());
  }
  const DataSpec& d = spec.data();
  absl::StatusOr<std::string> iter_name = io::DataIterForKind(d.kind());
  if (!iter_name.ok()) {
    return JobFieldError(iter_name.status().code(), "data.kind", iter_name.status().message());
  }
  // Kind mnist names its IDX files in fields of its own; the other kinds give the
  // iterator's arguments.
  if (d.kind() == "mnist") {
    if (!d.train_iter().empty() || !d.test_iter().empty()) {
      return JobFieldError(absl::StatusCode::kInvalidArgument,
                           d.train_iter().empty() ? "data.test_iter" : "data.train_iter",
                           "only for kinds csv and imagerecord");
    }
  } else if (d.train_iter().empty()) {
    return JobFieldError(
        absl::StatusCode::kInvalidArgument, "data.train_iter",
        absl::StrCat("required for kind '", d.kind(), "' (the ", *iter_name, " arguments)"));
  }
  RETURN_IF_ERROR(CheckIterArguments(*iter_name, "data.train_iter", d.train_iter(), false));
  RETURN_IF_ERROR(CheckIterArguments(*iter_name, "data.test_iter", d.test_iter(), true));
  RETURN_IF_ERROR(AmpOptionsOf(spec).status());
  const GradientCompression& c = spec.compression();
  std::string field;
  if (absl::Status st = kvstore::internal::CheckCompression(c, &field); !st.ok()) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, absl::StrCat("compression_params.", field),
                         st.message());
  }
  if ((!c.type().empty() || !c.pull_type().empty()) && !absl::StartsWith(store, "dist")) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "compression_params",
                         absl::StrCat("compresses the transfers to and from parameter servers; this job has kvstore '",
                                      store, "'"));
  }
  if (spec.check_finite() && (store != "local" || spec.devices_size() > 1)) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "check_finite",
                         absl::StrCat("only for one device without parameter servers; this job has kvstore '", store,
                                      "' and ", std::max(1, spec.devices_size()), " devices"));
  }
  const CheckpointPolicy& policy = spec.checkpoint();
  if (policy.every_batches() < 0 || policy.every_seconds() < 0 || policy.keep() < 0) {
    return JobFieldError(absl::StatusCode::kInvalidArgument, "checkpoint",
                         "every_batches, every_seconds and keep must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace tessera::jobs

// The checks of a job that need nothing but its JobSpec, in one place: the worker applies
// them before anything else (worker/job_runner.h), the coordinator before it queues a job
// (so that a bad job fails at Submit, not after the jobs ahead of it), and the client after
// it reads a job file. What needs the worker's files, network or memory is checked there.
#ifndef TESSERA_JOBS_JOB_SPEC_CHECK_H_
#define TESSERA_JOBS_JOB_SPEC_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/worker.pb.h"

namespace tessera::jobs {

// The newest JobSpec version this build understands.
inline constexpr uint32_t kJobSpecVersion = 6;

// `code` with "job field 'FIELD': WHAT", as every job error names its field.
absl::Status JobFieldError(absl::StatusCode code, absl::string_view field, absl::string_view what);

// The version, batch_size, num_epochs, the store type and its servers, num_workers and rank,
// which iterator fields the data kind takes, and resume's form. INVALID_ARGUMENT (the store
// without servers: FAILED_PRECONDITION) naming the field.
absl::Status CheckJobSpec(const JobSpec& spec);

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_JOB_SPEC_CHECK_H_

// A job's mixed precision (proto/worker.proto AmpPolicy) as the graph pass takes it
// (graph/amp.h): the one place that reads and checks the job's `amp` field, for the client,
// the coordinator and the worker alike.
#ifndef TESSERA_JOBS_AMP_POLICY_H_
#define TESSERA_JOBS_AMP_POLICY_H_

#include <optional>

#include "absl/status/statusor.h"
#include "graph/amp.h"
#include "proto/worker.pb.h"

namespace tessera::jobs {

// nullopt when the job trains in float32 (no amp field). loss_scale "dynamic" (float16's
// default) or a number (static). INVALID_ARGUMENT naming the field for a dtype other than
// bfloat16 / float16, a loss_scale that is neither, or dynamic scaling where it cannot run
// (parameter servers, several devices, check_finite).
absl::StatusOr<std::optional<graph::AmpOptions>> AmpOptionsOf(const JobSpec& spec);

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_AMP_POLICY_H_

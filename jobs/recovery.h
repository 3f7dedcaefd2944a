// Recovery: a job that loses a process (a worker or parameter server killed, evicted or
// restarted) is run again from its newest complete checkpoint (train/checkpoint.h) without a
// human, as many times as its RecoveryPolicy allows, each time after waiting for every
// daemon of its cluster to answer again - brought back by a supervisor (the local cluster of
// `tessera train`) or by Kubernetes (a StatefulSet's pod). The one loop both runners of a job
// use: the coordinator for submitted jobs and `tessera train|launch` for their own.
//
// Each run has a job id of its own ("ID", then "ID.r1", "ID.r2"...), so that a parameter
// server that outlived the lost worker starts the rerun afresh instead of mixing it with the
// failed run's half-merged round.
#ifndef TESSERA_JOBS_RECOVERY_H_
#define TESSERA_JOBS_RECOVERY_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "jobs/job_client.h"
#include "jobs/recovery_policy.h"
#include "proto/worker.pb.h"

namespace tessera::jobs {

// One run of `spec` on the cluster, waiting up to `connect_wait` for its daemons.
using JobRun = std::function<absl::StatusOr<JobOutcome>(const JobSpec& spec, absl::Duration connect_wait)>;

// Runs `spec` with `run`, and again after each lost process while the policy allows and
// `cancelled()` is false: resumed from the newest complete checkpoint when the job takes
// checkpoints, else from the start. `on_restart` sees a Restarted event before each rerun.
// The last run's outcome (its job_id the run's); a failure after the last restart says how
// many there were.
absl::StatusOr<JobOutcome> RunWithRecovery(const JobSpec& spec, const JobRun& run,
                                           const std::function<void(const JobEvent&)>& on_restart,
                                           const std::function<bool()>& cancelled);

// Waits up to `timeout` for every worker and server of `cluster` to accept a connection;
// UNAVAILABLE names the first that does not.
absl::Status WaitForCluster(const Cluster& cluster, absl::Duration timeout);

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_RECOVERY_H_

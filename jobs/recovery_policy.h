// What a job's runner does when a process of the job dies (proto/worker.proto
// RecoveryPolicy), read from its JobSpec with the defaults filled in: whether a lost worker is
// replaced and rejoins the run (jobs/job_client.h), and how often the whole job runs again from
// its newest checkpoint (jobs/recovery.h).
#ifndef TESSERA_JOBS_RECOVERY_POLICY_H_
#define TESSERA_JOBS_RECOVERY_POLICY_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace tessera::jobs {

struct RecoveryPolicy {
  int max_restarts = 3;
  // For the cluster to answer again, per restart; for a lost worker's replacement to come.
  absl::Duration wait = absl::Seconds(120);
  // A lost worker of a parameter-server job is replaced: it rejoins the run, no rollback.
  bool replace_workers = false;
};

// The job's policy, defaults filled in: 3 restarts, 120 s, lost workers replaced in jobs of
// parameter servers (kvstore dist_*) unless the job says no.
RecoveryPolicy RecoveryPolicyOf(const JobSpec& spec);

// Whether a run's failure is a lost process, which a rerun may cure (UNAVAILABLE, ABORTED,
// DEADLINE_EXCEEDED), rather than a fault of the job (a bad field, a shape) or a cancel.
bool IsLostProcess(const absl::Status& status);

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_RECOVERY_POLICY_H_

// JobManager: the state of one worker daemon - at most one job running on its own thread,
// its progress, cancellation, and the parameters of the last job. The gRPC Worker service
// (worker/worker_service.h) is a thin adapter over it; tests drive it directly.
//
// Thread safety: every method may be called from any thread.
#ifndef TESSERA_WORKER_JOB_MANAGER_H_
#define TESSERA_WORKER_JOB_MANAGER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancellation.h"
#include "core/mutex.h"
#include "ndarray/runtime.h"
#include "proto/worker.pb.h"
#include "worker/job_runner.h"

namespace tessera::worker {

// How long a cancelled job may take to stop at its next batch before its waits are cut.
inline constexpr absl::Duration kCancelGrace = absl::Seconds(2);
// How long Start waits for a stale run of the same job to stop (below).
inline constexpr absl::Duration kStaleRunWait = absl::Seconds(10);

class JobManager {
 public:
  // `rt` (not owned) outlives the manager; every job runs in `environment`.
  explicit JobManager(const Runtime& rt, JobEnvironment environment = {});
  ~JobManager();  // cancels a running job and waits for it

  // Starts `spec` on a new thread: `sink` gets its events, then `done` its outcome (both on
  // that thread; `done` is the last call). RESOURCE_EXHAUSTED while another job runs -
  // except an older run of the same job (same name, another job_id): the job's runner has
  // restarted it after losing this worker (cut off, then back), so that run is stale; it is
  // cancelled (its streams cut at once) and, once it stopped (at most kStaleRunWait), the
  // new run starts.
  absl::Status Start(JobSpec spec, JobEventSink sink, std::function<void(absl::Status)> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the running job to stop before its next batch; if it has not within
  // kCancelGrace (it waits on a frozen parameter server, say), cuts its parameter-server
  // streams so that it stops then. False when no job runs.
  bool Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  WorkerStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // The running job's progress is not a snapshot of parameters: these are the last
  // finished job's. FAILED_PRECONDITION before any job finished, or when `job_id` (unless
  // empty) is not the last finished job's.
  absl::StatusOr<GetParamsReply> Params(const std::string& job_id = "") const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static std::string JobIdOf(const JobSpec& spec) {
    return spec.job_id().empty() ? spec.name() : spec.job_id();
  }
  // Start's first step: stops a stale run of `spec`'s job, if one runs (see Start).
  void StopStaleRun(const JobSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);

  const Runtime rt_;
  const JobEnvironment environment_;
  const std::string incarnation_;  // WorkerStatus.incarnation: this manager's, one per start
  mutable Mutex mu_;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::string running_job_id_ ABSL_GUARDED_BY(mu_);  // the running run's (JobIdOf)
  // The running (or last) job's; a new one per job.
  std::shared_ptr<Cancellation> cancellation_ ABSL_GUARDED_BY(mu_);
  // After a Cancel: cuts the job's waits unless it stops within kCancelGrace. The grace lets
  // every worker of a dist job see its own Cancel and stop at a batch boundary; cutting at
  // once would fail the others' rounds (UNAVAILABLE) before their Cancel arrives.
  std::thread cutter_ ABSL_GUARDED_BY(mu_);
  CondVar idle_cv_;  // a job ended
  WorkerStatus status_ ABSL_GUARDED_BY(mu_);
  std::optional<JobResult> last_ ABSL_GUARDED_BY(mu_);
  std::string last_job_id_ ABSL_GUARDED_BY(mu_);  // last_'s
  // When the last job ended UNAVAILABLE (a peer left): a Cancel arriving within kCancelGrace
  // after it is the cause (a peer stopped for that same Cancel first), and the job is
  // reported CANCELLED as if the Cancel had come here first.
  std::optional<absl::Time> unavailable_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_JOB_MANAGER_H_

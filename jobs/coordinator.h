// Coordinator: the cluster's owner of submitted jobs (proto/jobs.proto). It keeps a bounded
// FIFO queue, runs one job at a time across every worker of the job's cluster on its own
// thread, records each job's state, progress and events, and lets clients list, follow,
// wait for and cancel jobs by id, whether or not the client that submitted a job is still
// there. The first worker daemon of a cluster hosts one (worker/tessera_worker_main.cc);
// jobs/jobs_service.h serves it over gRPC, and tests drive it in-process.
//
// Durability: records and events live in a JobStore (jobs/job_store.h), so that they survive
// a restart of the daemon. A job queued when the daemon stopped is queued again when it
// comes back; a job that was running then runs again first, from its newest checkpoint
// (jobs/recovery.h).
//
// Owners: every call names the caller's owner (the fingerprint of its cluster token); jobs of
// another owner are NOT_FOUND to it and absent from its list.
//
// Thread safety: every method may be called from any thread.
#ifndef TESSERA_JOBS_COORDINATOR_H_
#define TESSERA_JOBS_COORDINATOR_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancellation.h"
#include "core/mutex.h"
#include "jobs/job_store.h"
#include "proto/jobs.pb.h"
#include "rpc/transport_security.h"

namespace tessera::jobs {

// Runs one job on its cluster to its end: `request.spec` carries the job's id; every worker's
// event goes to `on_event(rank, event)` (serialized); `cancellation` asks the run to stop. Returns
// worker 0's final evaluation, or the job's failure naming the worker.
using ClusterRunner = std::function<absl::StatusOr<std::map<std::string, double>>(
    const SubmitJobRequest& request, const std::function<void(int rank, const JobEvent&)>& on_event,
    Cancellation* cancellation)>;

// The runner of a real cluster: JobClient (jobs/job_client.h) over gRPC with `security`.
ClusterRunner GrpcClusterRunner(rpc::TransportSecurity security);

// What an attached client receives. Calls come under the coordinator's lock, on any thread,
// and must not call the coordinator back (queue what to send and return).
class JobListener {
 public:
  virtual ~JobListener() = default;
  virtual void OnEvent(const RankedEvent& event) = 0;
  // Once, last: the job's final record.
  virtual void OnEnd(const JobRecord& record) = 0;
};

struct CoordinatorOptions {
  std::string state_dir;  // where records and events are kept; empty: in memory only
  int max_queued = 16;    // jobs waiting behind the running one
  int max_finished = 100;  // finished jobs kept (oldest dropped first)
  // A job gets a batch event at least this often, so that `tessera jobs` shows its progress.
  int batch_event_every = 10;
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class Coordinator {
 public:
  // Detaches its listener when destroyed: no call reaches it after that.
  class Attachment {
   public:
    ~Attachment();
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;

   private:
    friend class Coordinator;
    Attachment(Coordinator* owner, JobListener* listener) : owner_(owner), listener_(listener) {}
    Coordinator* const owner_;
    JobListener* const listener_;
  };

  // Loads the jobs kept in options.state_dir, queues again those that were queued, and starts
  // the thread that runs them.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options,
                                                           ClusterRunner runner);
  // Stops the running job (it ends FAILED: ABORTED) and waits for it, and runs no other:
  // queued jobs stay queued in the store for the next Open; later Submits are UNAVAILABLE.
  // A daemon calls it while its server still serves, so that the job's workers hear the
  // cancel. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  ~Coordinator();  // Stop()

  // Queues the job: QUEUED with its position, or RUNNING when it started at once.
  absl::StatusOr<JobRecord> Submit(SubmitJobRequest request, const std::string& owner)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<JobRecord> List(const std::string& owner) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<JobRecord> Get(const std::string& id, const std::string& owner) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // A queued job leaves the queue; a running one is asked to stop (its record says RUNNING
  // until it has). A finished job is returned as it is.
  absl::StatusOr<JobRecord> Cancel(const std::string& id, const std::string& owner)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `listener` (not owned; outlives the attachment) gets the job's events so far, at once on
  // this thread, then the live ones, then OnEnd; for a finished job all of it at once.
  absl::StatusOr<std::unique_ptr<Attachment>> Attach(const std::string& id,
                                                     const std::string& owner,
                                                     JobListener* listener)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    SubmitJobRequest request;
    JobRecord record;
    std::vector<RankedEvent> events;  // but batch events
    std::map<int, RankedEvent> latest_batch;  // each worker's, until its epoch ends
    bool cancel_requested = false;  // by a client (not by this coordinator stopping)
    std::set<JobListener*> listeners;
  };

  Coordinator(CoordinatorOptions options, ClusterRunner runner, JobStore store)
      : options_(std::move(options)), runner_(std::move(runner)), store_(std::move(store)) {}
  void RunLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs job `id`, which RunLoop made RUNNING, to its end.
  void RunOne(const std::string& id, const SubmitJobRequest& request,
              const std::shared_ptr<Cancellation>& cancellation) ABSL_LOCKS_EXCLUDED(mu_);
  void OnEvent(const std::string& id, int rank, const JobEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `job` with `status` (and worker 0's final evaluation), saves it and tells its
  // listeners.
  void Finish(Job& job, const absl::Status& status, const std::map<std::string, double>& eval)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND unless `id` names a job of `owner`; INVALID_ARGUMENT for an id that is not one.
  absl::StatusOr<Job*> Find(const std::string& id, const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobRecord Snapshot(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Save(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropOldFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMs() const { return absl::ToUnixMillis(options_.now()); }

  const CoordinatorOptions options_;
  const ClusterRunner runner_;
  mutable Mutex mu_;
  CondVar queue_cv_;
  JobStore store_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);  // ids, next first
  std::shared_ptr<Cancellation> cancellation_ ABSL_GUARDED_BY(mu_);  // the running job's
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_COORDINATOR_H_

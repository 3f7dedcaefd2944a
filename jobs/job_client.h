// JobClient: runs one training job on a cluster of worker daemons (proto/worker.proto).
// It gives every worker its share of the job - its rank, its part of the data, the
// parameter servers - and merges their event streams.
//
// Failures: the first worker whose stream ends in an error (a bad job, a lost server, a
// killed worker: its connection breaks at once, or within the keepalive time when it hangs)
// cancels the others, and Run returns that error prefixed with the worker's rank and
// address, e.g. "worker 1 (127.0.0.1:7001): UNAVAILABLE: ...".
//
// Replacement (RecoveryPolicy.replace_workers, jobs of parameter servers): a worker whose
// stream ends as a lost process does not fail the run at once. Run waits (up to the policy's
// wait) for the worker's address to answer from another process - its daemon restarted by
// its supervisor or by Kubernetes - while the other workers wait at the servers, then gives
// it the rank's share again with JobSpec.rejoin, and says so in a WorkerReplaced event. A
// worker that does not come back in time fails the run as above.
//
// Thread safety: one Run at a time; Cancel may be called from any thread (e.g. on Ctrl-C).
#ifndef TESSERA_JOBS_JOB_CLIENT_H_
#define TESSERA_JOBS_JOB_CLIENT_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"
#include "rpc/transport_security.h"

namespace tessera::jobs {

struct Cluster {
  std::vector<std::string> workers;  // host:port of every tessera-worker, rank order
  std::vector<std::string> servers;  // host:port of every tessera-ps (dist KVStores)
  rpc::TransportSecurity security;   // how to reach the workers: TLS, the cluster token
};

struct JobOutcome {
  std::string job_id;                  // the run's identity (JobSpec.job_id)
  std::map<std::string, double> eval;  // worker 0's final evaluation
  double seconds = 0;                  // worker 0's training time
};

class JobClient {
 public:
  // Waits up to `timeout` for every worker to accept connections; UNAVAILABLE names the
  // first that does not and why (refused, TLS handshake failed, ...).
  static absl::StatusOr<std::unique_ptr<JobClient>> Connect(const Cluster& cluster,
                                                            absl::Duration timeout);

  // Runs `spec` on every worker; `on_event(rank, event)` sees each event as it arrives
  // (calls are serialized). The run's identity is spec.job_id, or a new one when empty. Blocks until every worker is done: after a failure, until the
  // others have stopped their share of the job (or stopped answering, or 10 s have passed),
  // so that the next Run is not refused as "one job at a time".
  absl::StatusOr<JobOutcome> Run(const JobSpec& spec,
                                 const std::function<void(int rank, const JobEvent&)>& on_event);
  // Stops the running job on every worker (Run then returns CANCELLED); without one, the
  // next Run returns CANCELLED at once.
  void Cancel();
  // Worker 0's parameters at the end of run `job_id`; FAILED_PRECONDITION when the last job
  // it finished is another (one ran since).
  absl::StatusOr<GetParamsReply> Params(const std::string& job_id);
  // Every worker's status, rank order; an unreachable worker is an error naming it.
  absl::StatusOr<std::vector<WorkerStatus>> Status();

 private:
  explicit JobClient(Cluster cluster) : cluster_(std::move(cluster)) {}
  std::string Name(int rank) const;
  // After a failed Run: waits (up to 10 s) until every worker but `skip_rank` is idle.
  void WaitUntilIdle(int skip_rank);
  // The status of the worker behind `stub`, naming its incarnation.
  static absl::StatusOr<WorkerStatus> StatusOf(Worker::Stub& stub, absl::Duration timeout);
  // Waits up to `wait` (or until `stop()`) for worker `rank`'s address to answer, idle, from
  // another incarnation than `lost`; a stub on a channel of its own to it.
  absl::StatusOr<std::unique_ptr<Worker::Stub>> AwaitReplacement(int rank, const std::string& lost,
                                                                 absl::Duration wait,
                                                                 const std::function<bool()>& stop);

  const Cluster cluster_;
  std::vector<std::unique_ptr<Worker::Stub>> stubs_;
  std::mutex mu_;
  std::vector<grpc::ClientContext*> running_;  // the streams of the current Run, per rank
  bool cancel_requested_ = false;  // Cancel was called during or before the current Run (mu_)
};

}  // namespace tessera::jobs

#endif  // TESSERA_JOBS_JOB_CLIENT_H_

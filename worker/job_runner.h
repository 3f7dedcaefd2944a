// RunJob: one worker's share of a training job (proto/worker.proto's JobSpec), start to end:
// builds the network, the data iterators of this worker's partition, the KVStore the job
// names (dist types: connected to the job's parameter servers as worker `rank`), trains with
// Module::Fit and reports progress as JobEvents. What `tessera-worker` runs for each
// submitted job (worker/job_manager.h), and what tests call directly.
//
// Errors name the field, node or file at fault: a bad network (unknown operator, dangling
// input, shapes that do not fit the data) is INVALID_ARGUMENT/NOT_FOUND from the graph
// layer prefixed with "network", a missing data file names the file, an unknown optimizer,
// initializer, metric or KVStore type names the field; a dist KVStore without servers is
// FAILED_PRECONDITION. `should_stop` returning true ends the job with CANCELLED.
//
// Thread safety: RunJob blocks; the sink is called on the calling thread.
#ifndef TESSERA_WORKER_JOB_RUNNER_H_
#define TESSERA_WORKER_JOB_RUNNER_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/cancellation.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "jobs/job_spec_check.h"
#include "proto/worker.pb.h"
#include "rpc/transport_security.h"

namespace tessera::worker {

using jobs::kJobSpecVersion;

struct JobResult {
  std::map<std::string, NDArray> arg_params, aux_params;
  std::map<std::string, double> eval;  // the last epoch's evaluation (empty without test data)
};

using JobEventSink = std::function<void(const JobEvent& event)>;

// What a running job reports, on its own thread.
struct JobCallbacks {
  JobEventSink events;  // the job's events (batch events every spec.batch_event_every)
  // After every batch: the epoch (from 0) and the batches done in it. May be empty.
  std::function<void(int epoch, int batch)> progress;
};

// What the worker daemon, not the job, decides for every job it runs.
struct JobEnvironment {
  // TLS and the cluster token for the job's parameter-server connections.
  rpc::TransportSecurity security;
  // A job reads its data files only under `data_root` and writes its checkpoints only under
  // `run_root` (core/confined_path.h; relative paths are taken from them); anything else is
  // PERMISSION_DENIED naming the field and the path. Empty: no confinement (in-process
  // callers); the daemon always sets both.
  std::string data_root;
  std::string run_root;
  // What the job's arrays may take at the least before it is refused with
  // RESOURCE_EXHAUSTED (checked before they are allocated); 0: the process's memory
  // (core/memory_limit.h).
  uint64_t memory_limit_bytes = 0;
};

// The environment of a worker daemon serving jobs with `security`: each root as given, else
// from TESSERA_DATA_ROOT / TESSERA_RUN_ROOT, else the working directory. INVALID_ARGUMENT
// naming the root when it is not a folder.
absl::StatusOr<JobEnvironment> DaemonJobEnvironment(const rpc::TransportSecurity& security,
                                                    const std::string& data_root,
                                                    const std::string& run_root);

// Runs `spec` to its end. `cancellation` (may be null) stops it before its next batch, and at
// once where it waits on a parameter server; the job then returns CANCELLED or the error the
// cut produced.
absl::StatusOr<JobResult> RunJob(const Runtime& rt, const JobSpec& spec, const JobCallbacks& callbacks,
                                 Cancellation* cancellation = nullptr,
                                 const JobEnvironment& environment = {});
// The same with events only.
inline absl::StatusOr<JobResult> RunJob(const Runtime& rt, const JobSpec& spec,
                                        const JobEventSink& sink,
                                        Cancellation* cancellation = nullptr,
                                        const JobEnvironment& environment = {}) {
  return RunJob(rt, spec, JobCallbacks{.events = sink}, cancellation, environment);
}

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_JOB_RUNNER_H_

// The job commands of `tessera` as library calls:
//
//   train JOB.yaml [--json]               the job on an embedded local cluster of the size the
//                                         job file names (1 server + 2 workers by default)
//   launch -n W -s S JOB.yaml [--json]    the same on a local cluster of W workers, S servers
//   submit --workers H:P,... [--servers H:P,...] JOB.yaml [--json]
//                                         the job on daemons already running
//   status --workers H:P,...              what each worker daemon is doing
//
// submit hands the job to the cluster's coordinator (its first worker, proto/jobs.proto) and
// follows it; the cluster runs it to its end whether or not the command does. Ctrl-C, SIGTERM
// or a lost connection stop the following only, and say how to attach or cancel; --no-wait
// prints the job's id and returns at once. train and launch own their embedded cluster:
// Ctrl-C or SIGTERM there cancels the job and stops the daemons.
//
// submit and status reach daemons with --tls_dir, --token_file and --insecure
// (rpc/transport_security.h); train and launch make their cluster's own token.
//
// --format mxnet makes the checkpoints and the final parameters MXNet's .params files
// (checkpoint_format in the job file).
//
// A run prints one summary line per epoch (worker 0's train and test metrics, time,
// samples/s); on a terminal a progress line shows the current batch. It writes
// RUN_DIR/metrics.csv and RUN_DIR/plot.svg, checkpoints under RUN_DIR (rank 0, every
// epoch) and the daemons' logs under RUN_DIR/logs. --json prints one JSON object last
// (test_accuracy, train_accuracy, epochs, seconds, run_dir, job_id, ...).
#ifndef TESSERA_CLIENT_TRAIN_COMMAND_H_
#define TESSERA_CLIENT_TRAIN_COMMAND_H_

#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "jobs/job_client.h"

namespace tessera::client {

struct TrainOptions {
  std::string job_path;
  bool json = false;
  std::optional<int> num_workers, num_servers;  // override the job file's cluster
  std::optional<jobs::Cluster> cluster;               // submit: daemons already running
  // --format tessera|mxnet: the checkpoints' and final parameters' format, overriding the
  // job file's checkpoint_format.
  std::optional<std::string> checkpoint_format;
  bool wait = true;  // submit: follow the job to its end (--no-wait: print its id, return)
  // --resume ("latest": the newest complete checkpoint of the job's) or --resume=PATH (a
  // checkpoint folder; for submit, under the workers' run root): continue from there.
  std::optional<std::string> resume;
  FILE* out = stdout;
  bool progress = false;  // a live progress line (on a terminal)
};

struct TrainSummary {
  std::map<std::string, double> eval;   // worker 0's last test metrics
  std::map<std::string, double> train;  // worker 0's last training metrics
  int epochs = 0;
  double seconds = 0;
  std::string run_dir;
  std::string params;  // RUN_DIR/NAME-final.params: worker 0's parameters at the end
  std::string job_id;  // the run's id (submit: the coordinator's)
};

// Runs the job; the status names the worker or daemon that failed.
absl::StatusOr<TrainSummary> RunTrain(const TrainOptions& options);

// The command lines above (argv[1] is the command); returns the process exit code.
int TrainMain(int argc, char** argv);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_TRAIN_COMMAND_H_

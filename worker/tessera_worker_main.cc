// tessera-worker: one worker daemon. A thin shell: it serves the Worker service
// (worker/worker_service.h), the Jobs service (jobs/jobs_service.h: the first worker of a
// cluster coordinates the jobs submitted to it, kept under RUN_ROOT/jobs) and gRPC's health
// service until SIGTERM or SIGINT; each job's share runs on this process's engine.
//
//   tessera-worker --address=127.0.0.1:7000
//   tessera-worker --address=127.0.0.1:0 --port_file=/tmp/w0.port   (a free port)
//   tessera-worker --address=0.0.0.0:7000 --tls_dir=certs/host-a --token_file=token
//                  --metrics_address=0.0.0.0:9100   (Prometheus metrics, rpc/metrics_flags.h)
//
// Beyond loopback it serves only over TLS with a cluster token (or with --insecure); the
// same settings secure its jobs' connections to the parameter servers (rpc/server.h). Jobs
// read data only under --data_root and write checkpoints only under --run_root.
#include <chrono>
#include <string>

#include "absl/flags/flag.h"
#include "core/daemon.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "grpcpp/grpcpp.h"
#include "jobs/coordinator.h"
#include "jobs/jobs_service.h"
#include "ndarray/runtime.h"
#include "ndarray/runtime_metrics.h"
#include "rpc/metrics_flags.h"
#include "rpc/security_flags.h"
#include "rpc/server.h"
#include "spdlog/spdlog.h"
#include "worker/job_manager.h"
#include "worker/worker_service.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0",
          "host:port to serve on (port 0: a free one), or unix:PATH");
ABSL_FLAG(int, parent_pid, 0,
          "stop (SIGTERM) when this process dies, e.g. the launcher of a local cluster; 0: never");
ABSL_FLAG(std::string, port_file, "",
          "write the bound port (0 on a Unix socket) and a newline to this file, once serving");
ABSL_FLAG(uint64_t, seed, 0, "seed of the engine's random generators");
ABSL_FLAG(std::string, data_root, "",
          "jobs read data files only under this folder (TESSERA_DATA_ROOT; default: the working "
          "directory)");
ABSL_FLAG(int32_t, max_queued_jobs, 16,
          "submitted jobs that may wait behind the running one (more are RESOURCE_EXHAUSTED)");
ABSL_FLAG(std::string, run_root, "",
          "jobs write checkpoints only under this folder (TESSERA_RUN_ROOT; default: the working "
          "directory)");
ABSL_FLAG(bool, keep_jobs, true,
          "keep the records and events of the jobs submitted to this worker's coordinator "
          "under RUN_ROOT/jobs, so that they outlive this process and the job it ran runs again "
          "when it is back; false where something else owns the jobs (a JobSet, or a Job whose "
          "submitter resubmits with --resume=auto)");

int main(int argc, char** argv) {
  tessera::ParseDaemonFlags(argc, argv, "tessera-worker: runs Tessera training jobs");
  tessera::InitLogging();
  auto fail = [](const absl::Status& status) {
    spdlog::error("tessera-worker: {}", std::string(status.message()));
    return 1;
  };

  tessera::Mutex mu;
  tessera::CondVar cv;
  bool stop = false;  // under mu (a local cannot be ABSL_GUARDED_BY)
  tessera::OnTerminationSignal([&](int signo) {
    spdlog::info("tessera-worker: signal {}, shutting down", signo);
    tessera::MutexLock lock(&mu);
    stop = true;
    cv.SignalAll();
  });
  tessera::StopWithParent(absl::GetFlag(FLAGS_parent_pid));
  tessera::rpc::SetUpGrpcForDaemon();  // after the signal mask: gRPC starts threads

  absl::StatusOr<tessera::rpc::TransportSecurity> security =
      tessera::rpc::TransportSecurityFromFlags();
  if (!security.ok()) return fail(security.status());
  absl::StatusOr<std::unique_ptr<tessera::OwnedRuntime>> runtime =
      tessera::OwnedRuntime::Create(absl::GetFlag(FLAGS_seed));
  if (!runtime.ok()) return fail(runtime.status());
  const absl::StatusOr<tessera::worker::JobEnvironment> environment =
      tessera::worker::DaemonJobEnvironment(*security, absl::GetFlag(FLAGS_data_root),
                                            absl::GetFlag(FLAGS_run_root));
  if (!environment.ok()) return fail(environment.status());
  tessera::worker::JobManager jobs((*runtime)->get(), *environment);
  tessera::worker::WorkerServiceImpl service(&jobs);
  absl::StatusOr<std::unique_ptr<tessera::jobs::Coordinator>> coordinator =
      tessera::jobs::Coordinator::Open(
          {.state_dir = absl::GetFlag(FLAGS_keep_jobs) ? environment->run_root + "/jobs" : "",
           .max_queued = absl::GetFlag(FLAGS_max_queued_jobs)},
          tessera::jobs::GrpcClusterRunner(*security));
  if (!coordinator.ok()) return fail(coordinator.status());
  tessera::jobs::JobsServiceImpl jobs_service(coordinator->get());
  absl::StatusOr<tessera::rpc::RunningServer> running =
      tessera::rpc::StartServer({.name = "tessera-worker",
                                 .address = absl::GetFlag(FLAGS_address),
                                 .security = *security,
                                 .limits = tessera::rpc::kWorkerServiceLimits,
                                 .services = {&service, &jobs_service}});
  if (!running.ok()) return fail(running.status());
  std::unique_ptr<grpc::Server> server = std::move(running->server);
  spdlog::info("tessera-worker serving on {}{}{}; data root {}, run root {}", running->listening,
               security->tls() ? ", TLS" : "",
               security->token.empty() ? "" : ", cluster token required", environment->data_root,
               environment->run_root);
  const tessera::RuntimeMetrics runtime_metrics((*runtime)->get());
  absl::StatusOr<std::unique_ptr<tessera::rpc::MetricsServer>> metrics =
      tessera::rpc::MetricsServerFromFlags("tessera-worker", *security,
                                           {&tessera::ProcessMetrics(), &runtime_metrics});
  if (!metrics.ok()) return fail(metrics.status());
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    if (absl::Status written = tessera::WritePortFile(path, running->port); !written.ok())
      return fail(written);
  }
  {
    tessera::MutexLock lock(&mu);
    while (!stop) cv.Wait(&mu);
  }
  (*coordinator)->Stop();  // while serving: the job's workers, this one too, hear its cancel
  jobs.Cancel();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  coordinator->reset();  // after the server: no call reaches it any more
  spdlog::info("tessera-worker stopped");
  return 0;
}

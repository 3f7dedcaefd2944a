#include "client/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cluster_flags.h"
#include "client/job_file.h"
#include "client/local_cluster.h"
#include "client/run_printer.h"
#include "client/run_report.h"
#include "core/daemon.h"
#include "core/status_macros.h"
#include "jobs/coordinator_client.h"
#include "jobs/recovery.h"
#include "ndarray/params_file.h"
#include "nlohmann/json.hpp"
#include "rpc/transport_security.h"

namespace tessera::client {

using jobs::Cluster;
using jobs::JobClient;
using jobs::JobOutcome;

namespace {

// What a signal should stop (process-wide: signals are): the job of an embedded cluster, or
// the following of a submitted one.
std::mutex g_signal_mu;
JobClient* g_running = nullptr;
jobs::CoordinatorClient* g_following = nullptr;
bool g_interrupted = false;

// One line, keys in this order; strings escaped and non-finite numbers null by nlohmann.
std::string SummaryJson(const TrainSummary& s, const std::string& job) {
  nlohmann::ordered_json json = {{"job", job},
                                 {"job_id", s.job_id},
                                 {"epochs", s.epochs},
                                 {"seconds", s.seconds},
                                 {"run_dir", s.run_dir},
                                 {"params", s.params}};
  for (const auto& [name, value] : s.eval) json["test_" + name] = value;
  for (const auto& [name, value] : s.train) json["train_" + name] = value;
  return json.dump();
}

// The --workers flag that reaches `cluster`'s coordinator again.
std::string WorkersFlag(const Cluster& cluster) {
  return absl::StrCat("--workers ", absl::StrJoin(cluster.workers, ","));
}

// Worker 0's parameters of run `job_id` into RUN_DIR/NAME-final.params.
absl::StatusOr<std::string> SaveFinalParams(const Cluster& cluster, const std::string& job_id,
                                            const std::string& run_dir, const std::string& name,
                                            ParamsFormat format, JobClient* client) {
  std::unique_ptr<JobClient> connected;
  if (client == nullptr) {
    ASSIGN_OR_RETURN(connected, JobClient::Connect(cluster, absl::Seconds(60)));
    client = connected.get();
  }
  ASSIGN_OR_RETURN(const GetParamsReply params, client->Params(job_id));
  const std::string path = (std::filesystem::path(run_dir) / (name + "-final.params")).string();
  RETURN_IF_ERROR(WriteParams(path, params, format));
  return path;
}

// A job submitted to a standing cluster's coordinator: followed (unless --no-wait) until it
// ends; the cluster keeps it running when this process stops following.
absl::StatusOr<TrainSummary> RunSubmitted(const JobFile& job, const TrainOptions& options,
                                          ParamsFormat params_format, TrainSummary summary) {
  const Cluster& cluster = *options.cluster;
  ASSIGN_OR_RETURN(std::unique_ptr<jobs::CoordinatorClient> coordinator,
                   jobs::CoordinatorClient::Connect(cluster.workers[0], cluster.security,
                                                    absl::Seconds(60)));
  SubmitJobRequest request;
  *request.mutable_spec() = job.spec;
  if (options.progress) request.mutable_spec()->set_batch_event_every(5);
  for (const std::string& w : cluster.workers) request.add_workers(w);
  for (const std::string& s : cluster.servers) request.add_servers(s);
  ASSIGN_OR_RETURN(const JobRecord submitted, coordinator->Submit(request));
  summary.job_id = submitted.id();
  if (!options.wait) {
    std::fprintf(options.out, "%s\n", submitted.id().c_str());
    return summary;
  }
  const std::string flags = WorkersFlag(cluster);
  std::fprintf(options.out,
               "tessera: job %s on %zu worker(s), %zu server(s), %s; the cluster runs it to its end "
               "whether or not this command follows it\n",
               submitted.id().c_str(), cluster.workers.size(), cluster.servers.size(),
               submitted.state() == JobRecord::QUEUED
                   ? absl::StrCat("queued (position ", submitted.queue_position(), ")").c_str()
                   : "running");
  std::fflush(options.out);
  {
    std::lock_guard<std::mutex> lock(g_signal_mu);
    if (g_interrupted) coordinator->Detach();
    g_following = coordinator.get();
  }
  RunPrinter printer(options.out, options.progress, job.spec.num_epochs());
  absl::StatusOr<JobRecord> end = coordinator->Attach(
      submitted.id(), [&](const RankedEvent& e) { printer.OnEvent(e.rank(), e.event()); });
  {
    std::lock_guard<std::mutex> lock(g_signal_mu);
    g_following = nullptr;
  }
  RETURN_IF_ERROR(printer.WriteReport(job.run_dir, job.spec.name()));
  if (!end.ok()) {
    return absl::Status(end.status().code(),
                        absl::StrCat(end.status().message(), "; job ", submitted.id(),
                                     " goes on: follow it with `tessera attach ", submitted.id(), " ",
                                     flags, "`, stop it with `tessera cancel ", submitted.id(), " ",
                                     flags, "`"));
  }
  if (end->state() != JobRecord::SUCCEEDED) {
    return absl::Status(static_cast<absl::StatusCode>(end->code()),
                        absl::StrCat("job ", end->id(), " ", jobs::StateName(end->state()), ": ",
                                     end->message()));
  }
  ASSIGN_OR_RETURN(summary.params, SaveFinalParams(cluster, end->run_id().empty() ? end->id() : end->run_id(),
                                                   job.run_dir, job.spec.name(),
                                                   params_format, nullptr));
  summary.eval = {end->eval().begin(), end->eval().end()};
  summary.train = printer.last_train();
  summary.epochs = static_cast<int>(printer.rows().size());
  summary.seconds = absl::ToDoubleSeconds(absl::Milliseconds(end->end_unix_ms() - end->start_unix_ms()));
  return summary;
}

}  // namespace

absl::StatusOr<TrainSummary> RunTrain(const TrainOptions& options) {
  ASSIGN_OR_RETURN(JobFile job, LoadJobFile(options.job_path, {.workers = options.num_workers,
                                                                .servers = options.num_servers}));
  if (options.checkpoint_format.has_value()) {
    job.spec.set_checkpoint_format(*options.checkpoint_format);
    job.spec.set_version(std::max<uint32_t>(job.spec.version(), 2));
  }
  if (options.resume.has_value()) {
    job.spec.set_resume(*options.resume);
    job.spec.set_version(std::max<uint32_t>(job.spec.version(), 3));
  }
  ASSIGN_OR_RETURN(
      const ParamsFormat params_format,
      ParseParamsFormat(job.spec.checkpoint_format().empty() ? "tessera"
                                                             : job.spec.checkpoint_format()));
  TrainSummary summary;
  summary.run_dir = job.run_dir;
  std::error_code ec;
  std::filesystem::create_directories(job.run_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create run folder ", job.run_dir, ": ", ec.message()));
  if (options.cluster) {
    ASSIGN_OR_RETURN(summary, RunSubmitted(job, options, params_format, std::move(summary)));
    if (options.json) std::fprintf(options.out, "%s\n", SummaryJson(summary, job.spec.name()).c_str());
    return summary;
  }

  // An embedded cluster: this process owns it, and the job ends with it.
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> local,
                   LocalCluster::Start({.num_servers = job.num_servers,
                                        .num_workers = job.num_workers,
                                        .replicas = job.replicas,
                                        .run_dir = job.run_dir,
                                        .max_restarts = jobs::RecoveryPolicyOf(job.spec).max_restarts,
                                        .stop_with_this_process = true}));
  const Cluster cluster = local->cluster();
  // The embedded workers write under the run folder (their run root), where a relative
  // prefix would land one run folder deeper.
  if (!job.spec.checkpoint_prefix().empty()) {
    job.spec.set_checkpoint_prefix((std::filesystem::absolute(job.run_dir) / job.spec.name()).string());
  }
  // A checkpoint named here is named from this process's folder, not the workers'.
  if (!job.spec.resume().empty() && job.spec.resume() != "latest" && job.spec.resume() != "auto") {
    job.spec.set_resume(std::filesystem::absolute(job.spec.resume()).string());
  }
  JobSpec spec = job.spec;
  if (options.progress) spec.set_batch_event_every(5);
  std::fprintf(options.out, "tessera: job '%s' on %zu worker(s), %zu server(s); run folder %s\n",
               spec.name().c_str(), cluster.workers.size(), cluster.servers.size(), job.run_dir.c_str());
  RunPrinter printer(options.out, options.progress, spec.num_epochs());
  // One run; after a lost process the cluster's supervisor brings the daemon back, and
  // RunWithRecovery runs the job again from its newest checkpoint.
  auto run = [&](const JobSpec& attempt, absl::Duration wait) -> absl::StatusOr<JobOutcome> {
    RETURN_IF_ERROR(jobs::WaitForCluster(cluster, wait));
    ASSIGN_OR_RETURN(std::unique_ptr<JobClient> client, JobClient::Connect(cluster, wait));
    {
      std::lock_guard<std::mutex> lock(g_signal_mu);
      if (g_interrupted) return absl::CancelledError("interrupted");
      g_running = client.get();
    }
    absl::StatusOr<JobOutcome> outcome =
        client->Run(attempt, [&](int rank, const JobEvent& event) { printer.OnEvent(rank, event); });
    std::lock_guard<std::mutex> lock(g_signal_mu);
    g_running = nullptr;
    return outcome;
  };
  absl::StatusOr<JobOutcome> outcome = jobs::RunWithRecovery(
      spec, run, [&](const JobEvent& restarted) { printer.OnEvent(0, restarted); },
      [] {
        std::lock_guard<std::mutex> lock(g_signal_mu);
        return g_interrupted;
      });
  RETURN_IF_ERROR(printer.WriteReport(job.run_dir, spec.name()));
  if (!outcome.ok()) {
    absl::Status status = outcome.status();
    if (absl::Status alive = local->CheckAlive(); !alive.ok()) {
      status = absl::Status(status.code(), absl::StrCat(status.message(), "; ", alive.message()));
    }
    return status;
  }
  summary.job_id = outcome->job_id;
  ASSIGN_OR_RETURN(summary.params, SaveFinalParams(cluster, outcome->job_id, job.run_dir, spec.name(),
                                                   params_format, nullptr));
  summary.eval = outcome->eval;
  summary.train = printer.last_train();
  summary.epochs = static_cast<int>(printer.rows().size());
  summary.seconds = outcome->seconds;
  if (options.json) std::fprintf(options.out, "%s\n", SummaryJson(summary, spec.name()).c_str());
  return summary;
}

namespace {

int Usage() {
  std::fprintf(
      stderr,
      "usage: tessera train JOB.yaml [--json] [--format tessera|mxnet] [--resume[=auto|PATH]]\n"
      "       tessera launch -n WORKERS -s SERVERS JOB.yaml [--json] [--format F]\n"
      "              [--resume[=auto|PATH]]\n"
      "       tessera submit --workers H:P,... [--servers H:P,...] JOB.yaml [--json]\n"
      "              [--format F] [--no-wait] [--resume[=auto|PATH]]\n"
      "--resume continues from the job's newest complete checkpoint, --resume=PATH from that\n"
      "checkpoint folder, --resume=auto from the newest if there is one and from the start\n"
      "otherwise (for a job restarted by Kubernetes).\n"
      "       tessera status --workers H:P,...\n"
      "submit and status reach the workers with --tls_dir DIR (ca.pem; cert.pem and key.pem\n"
      "for mutual TLS), --token_file FILE, and --insecure for plaintext beyond loopback\n"
      "(or TESSERA_TLS_DIR, TESSERA_TOKEN_FILE, TESSERA_INSECURE=1).\n");
  return 2;
}

int PrintStatus(const Cluster& cluster) {
  absl::StatusOr<std::unique_ptr<JobClient>> client = JobClient::Connect(cluster, absl::Seconds(10));
  absl::StatusOr<std::vector<WorkerStatus>> statuses =
      client.ok() ? (*client)->Status() : absl::StatusOr<std::vector<WorkerStatus>>(client.status());
  if (!statuses.ok()) {
    std::fprintf(stderr, "tessera status: %s\n", std::string(statuses.status().message()).c_str());
    return 1;
  }
  for (size_t r = 0; r < statuses->size(); ++r) {
    const WorkerStatus& s = (*statuses)[r];
    std::printf("worker %zu (%s): %s job '%s' epoch %d batch %d%s\n", r, cluster.workers[r].c_str(),
                s.state() == WorkerStatus::RUNNING ? "running" : "idle", s.job().c_str(), s.epoch(),
                s.batch(),
                s.last_result().empty() ? "" : absl::StrCat(", last result: ", s.last_result()).c_str());
  }
  return 0;
}

}  // namespace

int TrainMain(int argc, char** argv) {
  const std::string command = argv[1];
  const bool remote = command == "submit" || command == "status";
  TrainOptions options;
  ClusterFlags flags;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](int& out) {
      return i + 1 < argc && absl::SimpleAtoi(argv[++i], &out) && out >= 1;
    };
    int n = 0;
    if (remote) {
      absl::StatusOr<bool> taken = flags.Consume(argc, argv, &i);
      if (!taken.ok()) {
        std::fprintf(stderr, "tessera %s: %s\n", command.c_str(), std::string(taken.status().message()).c_str());
        return Usage();
      }
      if (*taken) continue;
    }
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--format" && i + 1 < argc && command != "status") {
      options.checkpoint_format = argv[++i];
    } else if ((arg == "--resume" || arg.rfind("--resume=", 0) == 0) && command != "status") {
      options.resume = arg == "--resume" ? "latest" : arg.substr(9);
      if (options.resume->empty()) return Usage();
    } else if (arg == "--no-wait" && command == "submit") {
      options.wait = false;
    } else if (arg == "-n" && command == "launch") {
      if (!value(n)) return Usage();
      options.num_workers = n;
    } else if (arg == "-s" && command == "launch") {
      if (!value(n)) return Usage();
      options.num_servers = n;
    } else if (arg.rfind("-", 0) != 0 && options.job_path.empty()) {
      options.job_path = arg;
    } else {
      std::fprintf(stderr, "tessera %s: unexpected argument '%s'\n", command.c_str(), arg.c_str());
      return Usage();
    }
  }
  if (remote) {
    if (flags.cluster.workers.empty()) return Usage();
    absl::StatusOr<Cluster> cluster = flags.Resolve();
    if (!cluster.ok()) {
      std::fprintf(stderr, "tessera %s: %s\n", command.c_str(),
                   std::string(cluster.status().message()).c_str());
      return 1;
    }
    if (command == "status") return PrintStatus(*cluster);
    options.cluster = *std::move(cluster);
  }
  if (options.job_path.empty()) return Usage();
  options.progress = !options.json && isatty(fileno(stdout));
  OnTerminationSignal([](int) {
    std::lock_guard<std::mutex> lock(g_signal_mu);
    g_interrupted = true;
    if (g_running != nullptr) g_running->Cancel();
    if (g_following != nullptr) g_following->Detach();
  });
  absl::StatusOr<TrainSummary> summary = RunTrain(options);
  if (!summary.ok()) {
    std::fprintf(stderr, "\ntessera %s: %s\n", command.c_str(), summary.status().ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tessera::client

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
#include "client/job_file.h"
#include "client/local_cluster.h"
#include "client/progress.h"
#include "client/run_report.h"
#include "core/daemon.h"
#include "core/status_macros.h"
#include "ndarray/params_file.h"
#include "nlohmann/json.hpp"
#include "rpc/transport_security.h"

namespace tessera::client {
namespace {

// The job a signal should cancel (process-wide: signals are).
std::mutex g_signal_mu;
JobClient* g_running = nullptr;
bool g_interrupted = false;

std::string Metrics(const std::map<std::string, double>& values) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : values) parts.push_back(absl::StrFormat("%s %.4f", name, value));
  return absl::StrJoin(parts, ", ");
}

// One line, keys in this order; strings escaped and non-finite numbers null by nlohmann.
std::string SummaryJson(const TrainSummary& s, const std::string& job) {
  nlohmann::ordered_json json = {{"job", job},
                                 {"epochs", s.epochs},
                                 {"seconds", s.seconds},
                                 {"run_dir", s.run_dir},
                                 {"params", s.params}};
  for (const auto& [name, value] : s.eval) json["test_" + name] = value;
  for (const auto& [name, value] : s.train) json["train_" + name] = value;
  return json.dump();
}

}  // namespace

absl::StatusOr<TrainSummary> RunTrain(const TrainOptions& options) {
  ASSIGN_OR_RETURN(JobFile job, LoadJobFile(options.job_path, {.workers = options.num_workers,
                                                                .servers = options.num_servers}));
  if (options.checkpoint_format.has_value()) {
    job.spec.set_checkpoint_format(*options.checkpoint_format);
    job.spec.set_version(std::max<uint32_t>(job.spec.version(), 2));
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

  std::unique_ptr<LocalCluster> local;
  Cluster cluster;
  if (options.cluster) {
    cluster = *options.cluster;
  } else {
    ASSIGN_OR_RETURN(local, LocalCluster::Start({.num_servers = job.num_servers,
                                                 .num_workers = job.num_workers,
                                                 .run_dir = job.run_dir}));
    cluster = local->cluster();
    // The embedded workers write under the run folder (their run root), where a relative
    // prefix would land one run folder deeper.
    if (!job.spec.checkpoint_prefix().empty()) {
      job.spec.set_checkpoint_prefix(
          (std::filesystem::absolute(job.run_dir) / job.spec.name()).string());
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<JobClient> client, JobClient::Connect(cluster, absl::Seconds(60)));
  {
    std::lock_guard<std::mutex> lock(g_signal_mu);
    if (g_interrupted) return absl::CancelledError("interrupted");
    g_running = client.get();
  }
  JobSpec spec = job.spec;
  if (options.progress) spec.set_batch_event_every(5);
  std::fprintf(options.out, "tessera: job '%s' on %zu worker(s), %zu server(s); run folder %s\n",
               spec.name().c_str(), cluster.workers.size(), cluster.servers.size(), job.run_dir.c_str());
  std::vector<EpochRow> rows;
  int64_t batches_per_epoch = 0;  // from worker 0's Started event
  absl::StatusOr<JobOutcome> outcome = client->Run(spec, [&](int rank, const JobEvent& event) {
    if (rank != 0) return;
    if (event.has_started()) batches_per_epoch = event.started().batches_per_epoch();
    if (event.has_batch() && options.progress) {
      const JobEvent::Batch& b = event.batch();
      const std::string line =
          ProgressLine({.epoch = b.epoch() + 1,
                        .num_epochs = spec.num_epochs(),
                        .batch = b.batch(),
                        .batches_per_epoch = batches_per_epoch,
                        .samples_per_second = b.samples_per_second(),
                        .metrics = Metrics({b.metrics().begin(), b.metrics().end()})});
      // \x1b[K clears what a longer previous line left.
      std::fprintf(options.out, "\r%s\x1b[K", line.c_str());
      std::fflush(options.out);
    }
    if (event.has_epoch()) {
      const JobEvent::Epoch& e = event.epoch();
      EpochRow row{e.epoch() + 1, {e.train().begin(), e.train().end()}, {e.eval().begin(), e.eval().end()},
                   e.seconds(), e.samples_per_second()};
      std::fprintf(options.out, "%sepoch %d/%d  train: %s  test: %s  %.1f s  %.0f samples/s/worker\n",
                   options.progress ? "\r\x1b[K" : "", row.epoch, spec.num_epochs(), Metrics(row.train).c_str(),
                   Metrics(row.eval).c_str(), row.seconds, row.samples_per_second);
      std::fflush(options.out);
      summary.train = row.train;
      rows.push_back(std::move(row));
    }
  });
  {
    std::lock_guard<std::mutex> lock(g_signal_mu);
    g_running = nullptr;
  }
  if (!rows.empty()) {
    RETURN_IF_ERROR(WriteMetricsCsv((std::filesystem::path(job.run_dir) / "metrics.csv").string(), rows));
    RETURN_IF_ERROR(WritePlotSvg((std::filesystem::path(job.run_dir) / "plot.svg").string(), rows, spec.name()));
  }
  if (!outcome.ok()) {
    absl::Status status = outcome.status();
    if (local != nullptr) {
      if (absl::Status alive = local->CheckAlive(); !alive.ok()) {
        status = absl::Status(status.code(), absl::StrCat(status.message(), "; ", alive.message()));
      }
    }
    return status;
  }
  summary.params = (std::filesystem::path(job.run_dir) / (spec.name() + "-final.params")).string();
  RETURN_IF_ERROR(WriteParams(summary.params, outcome->params, params_format));
  summary.eval = outcome->eval;
  summary.epochs = static_cast<int>(rows.size());
  summary.seconds = outcome->seconds;
  if (options.json) std::fprintf(options.out, "%s\n", SummaryJson(summary, spec.name()).c_str());
  return summary;
}

namespace {

absl::StatusOr<std::vector<std::string>> HostList(const std::string& flag, const std::string& value) {
  std::vector<std::string> hosts = absl::StrSplit(value, ',', absl::SkipEmpty());
  if (hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs host:port,..."));
  return hosts;
}

int Usage() {
  std::fprintf(
      stderr,
      "usage: tessera train JOB.yaml [--json] [--format tessera|mxnet]\n"
      "       tessera launch -n WORKERS -s SERVERS JOB.yaml [--json] [--format F]\n"
      "       tessera submit --workers H:P,... [--servers H:P,...] JOB.yaml [--json]\n"
      "              [--format F]\n"
      "       tessera status --workers H:P,...\n"
      "submit and status reach the workers with --tls_dir DIR (ca.pem; cert.pem and key.pem\n"
      "for mutual TLS), --token_file FILE, and --insecure for plaintext beyond loopback\n"
      "(or TESSERA_TLS_DIR, TESSERA_TOKEN_FILE, TESSERA_INSECURE=1).\n");
  return 2;
}

}  // namespace

int TrainMain(int argc, char** argv) {
  const std::string command = argv[1];
  TrainOptions options;
  Cluster cluster;
  rpc::TransportSecuritySources security;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](int& out) {
      return i + 1 < argc && absl::SimpleAtoi(argv[++i], &out) && out >= 1;
    };
    int n = 0;
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--format" && i + 1 < argc && command != "status") {
      options.checkpoint_format = argv[++i];
    } else if (arg == "-n" && command == "launch") {
      if (!value(n)) return Usage();
      options.num_workers = n;
    } else if (arg == "-s" && command == "launch") {
      if (!value(n)) return Usage();
      options.num_servers = n;
    } else if ((arg == "--workers" || arg == "--servers") && i + 1 < argc) {
      absl::StatusOr<std::vector<std::string>> hosts = HostList(arg, argv[++i]);
      if (!hosts.ok()) return Usage();
      (arg == "--workers" ? cluster.workers : cluster.servers) = *hosts;
    } else if ((arg == "--tls_dir" || arg == "--token_file") && i + 1 < argc &&
               command != "train" && command != "launch") {
      (arg == "--tls_dir" ? security.tls_dir : security.token_file) = argv[++i];
    } else if (arg == "--insecure" && command != "train" && command != "launch") {
      security.insecure = true;
    } else if (arg.rfind("-", 0) != 0 && options.job_path.empty()) {
      options.job_path = arg;
    } else {
      std::fprintf(stderr, "tessera %s: unexpected argument '%s'\n", command.c_str(), arg.c_str());
      return Usage();
    }
  }
  if (command == "submit" || command == "status") {
    absl::StatusOr<rpc::TransportSecurity> loaded = rpc::LoadTransportSecurity(security);
    if (!loaded.ok()) {
      std::fprintf(stderr, "tessera %s: %s\n", command.c_str(),
                   std::string(loaded.status().message()).c_str());
      return 1;
    }
    cluster.security = *std::move(loaded);
  }
  if (command == "status") {
    if (cluster.workers.empty()) return Usage();
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
                  s.state() == WorkerStatus::RUNNING ? "running" : "idle", s.job().c_str(), s.epoch(), s.batch(),
                  s.last_result().empty() ? "" : absl::StrCat(", last result: ", s.last_result()).c_str());
    }
    return 0;
  }
  if (options.job_path.empty()) return Usage();
  if (command == "submit") {
    if (cluster.workers.empty()) return Usage();
    options.cluster = cluster;
  }
  options.progress = !options.json && isatty(fileno(stdout));
  OnTerminationSignal([](int) {
    std::lock_guard<std::mutex> lock(g_signal_mu);
    g_interrupted = true;
    if (g_running != nullptr) g_running->Cancel();
  });
  absl::StatusOr<TrainSummary> summary = RunTrain(options);
  if (!summary.ok()) {
    std::fprintf(stderr, "\ntessera %s: %s\n", command.c_str(), summary.status().ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tessera::client

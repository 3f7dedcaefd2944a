#include "client/jobs_command.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cluster_flags.h"
#include "client/run_printer.h"
#include "jobs/coordinator_client.h"
#include "nlohmann/json.hpp"

namespace tessera::client {
namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: tessera jobs --workers H:P,... [--json]\n"
               "       tessera attach ID --workers H:P,...\n"
               "       tessera wait ID --workers H:P,...\n"
               "       tessera cancel ID --workers H:P,...\n"
               "The first of --workers coordinates the cluster's jobs; reach it with --tls_dir,\n"
               "--token_file and --insecure as for submit.\n");
  return 2;
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "tessera %s: %s\n", command.c_str(), status.ToString().c_str());
  return 1;
}

std::string Time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms), absl::LocalTimeZone());
}

std::string Progress(const JobRecord& r) {
  if (r.state() == JobRecord::QUEUED) return absl::StrCat("queued #", r.queue_position());
  std::string progress = absl::StrCat("epoch ", r.epoch(), "/", r.num_epochs());
  if (r.state() == JobRecord::RUNNING) {
    absl::StrAppend(&progress, " batch ", r.batch());
    if (r.batches_per_epoch() > 0) absl::StrAppend(&progress, "/", r.batches_per_epoch());
  }
  return progress;
}

nlohmann::ordered_json ToJson(const JobRecord& r) {
  nlohmann::ordered_json json = {{"id", r.id()},
                                 {"name", r.name()},
                                 {"owner", r.owner()},
                                 {"state", jobs::StateName(r.state())},
                                 {"epoch", r.epoch()},
                                 {"num_epochs", r.num_epochs()},
                                 {"batch", r.batch()},
                                 {"batches_per_epoch", r.batches_per_epoch()},
                                 {"samples_per_second", r.samples_per_second()},
                                 {"queue_position", r.queue_position()},
                                 {"submit_unix_ms", r.submit_unix_ms()},
                                 {"start_unix_ms", r.start_unix_ms()},
                                 {"end_unix_ms", r.end_unix_ms()},
                                 {"message", r.message()}};
  json["eval"] = nlohmann::ordered_json::object();
  for (const auto& [name, value] : r.eval()) json["eval"][name] = value;
  return json;
}

// "job ID succeeded" (with the final evaluation) or "job ID failed: why".
std::string Outcome(const JobRecord& r) {
  std::string line = absl::StrCat("job ", r.id(), " ", jobs::StateName(r.state()));
  if (r.state() == JobRecord::SUCCEEDED) {
    const std::string eval = FormatMetrics({r.eval().begin(), r.eval().end()});
    if (!eval.empty()) absl::StrAppend(&line, "  test: ", eval);
  } else if (!r.message().empty()) {
    absl::StrAppend(&line, ": ", r.message());
  }
  return line;
}

int PrintJobs(jobs::CoordinatorClient& coordinator, bool json) {
  absl::StatusOr<std::vector<JobRecord>> records = coordinator.List();
  if (!records.ok()) return Fail("jobs", records.status());
  if (json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const JobRecord& r : *records) list.push_back(ToJson(r));
    std::printf("%s\n", nlohmann::ordered_json{{"jobs", list}}.dump().c_str());
    return 0;
  }
  std::printf("%-36s %-16s %-16s %-9s %-24s %10s  %-19s  %-19s  %-19s\n", "ID", "NAME", "OWNER", "STATE",
              "PROGRESS", "SAMPLES/S", "SUBMITTED", "STARTED", "ENDED");
  for (const JobRecord& r : *records) {
    std::printf("%-36s %-16s %-16s %-9s %-24s %10.0f  %-19s  %-19s  %-19s\n", r.id().c_str(),
                r.name().c_str(), r.owner().empty() ? "-" : r.owner().c_str(),
                jobs::StateName(r.state()).c_str(), Progress(r).c_str(), r.samples_per_second(),
                Time(r.submit_unix_ms()).c_str(), Time(r.start_unix_ms()).c_str(),
                Time(r.end_unix_ms()).c_str());
  }
  return 0;
}

}  // namespace

int JobsMain(int argc, char** argv) {
  const std::string command = argv[1];
  ClusterFlags flags;
  std::string id;
  bool json = false;
  for (int i = 2; i < argc; ++i) {
    absl::StatusOr<bool> taken = flags.Consume(argc, argv, &i);
    if (!taken.ok()) return Fail(command, taken.status());
    if (*taken) continue;
    const std::string arg = argv[i];
    if (arg == "--json" && command == "jobs") {
      json = true;
    } else if (arg.rfind("-", 0) != 0 && id.empty() && command != "jobs") {
      id = arg;
    } else {
      std::fprintf(stderr, "tessera %s: unexpected argument '%s'\n", command.c_str(), arg.c_str());
      return Usage();
    }
  }
  if (flags.cluster.workers.empty() || (command != "jobs" && id.empty())) return Usage();
  absl::StatusOr<jobs::Cluster> cluster = flags.Resolve();
  if (!cluster.ok()) return Fail(command, cluster.status());
  absl::StatusOr<std::unique_ptr<jobs::CoordinatorClient>> coordinator =
      jobs::CoordinatorClient::Connect(cluster->workers[0], cluster->security, absl::Seconds(30));
  if (!coordinator.ok()) return Fail(command, coordinator.status());
  if (command == "jobs") return PrintJobs(**coordinator, json);
  if (command == "cancel") {
    absl::StatusOr<JobRecord> record = (*coordinator)->Cancel(id);
    if (!record.ok()) return Fail(command, record.status());
    std::printf("%s\n", record->state() == JobRecord::RUNNING
                            ? absl::StrCat("job ", id, " stops at its next batch").c_str()
                            : Outcome(*record).c_str());
    return 0;
  }
  // attach and wait
  int num_epochs = 0;  // for "epoch k/N"
  if (absl::StatusOr<std::vector<JobRecord>> records = (*coordinator)->List(); records.ok()) {
    for (const JobRecord& r : *records) {
      if (r.id() == id) num_epochs = r.num_epochs();
    }
  }
  RunPrinter printer(stdout, command == "attach" && isatty(fileno(stdout)), num_epochs);
  absl::StatusOr<JobRecord> end = (*coordinator)->Attach(id, [&](const RankedEvent& e) {
    if (command == "attach") printer.OnEvent(e.rank(), e.event());
  });
  if (!end.ok()) return Fail(command, end.status());
  std::printf("%s\n", Outcome(*end).c_str());
  return end->state() == JobRecord::SUCCEEDED ? 0 : 1;
}

}  // namespace tessera::client

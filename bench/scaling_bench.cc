// scaling_bench: how LeNet training scales with the number of worker processes on one host.
//
// For each worker count W of --workers (default 1,2,4,8): a local cluster of 1 tessera-ps and
// W tessera-worker processes, each worker pinned to its share of this process's CPUs
// (LocalClusterOptions::pin_workers: a contiguous run of CPUs, or one CPU each when there are
// more workers than CPUs), so each sizes its engine and OpenMP threads to its share as a
// container with a CPU limit would. The job: LeNet, dist_sync, SGD with momentum, batch 64
// per worker, --epochs over the MNIST training split (8,000 digits, split among the
// workers). Figure: the workers' samples/s in their last epoch (the first pays for set-up),
// summed; ratio_vs_1 divides it by the one-worker figure of the same run.
//
// Targets (issue 20): on 16 cores 8 workers >= 1.6x 4 workers; on any host no worker count
// below one worker. Last line: one JSON object with the machine, every row, ratio_8_vs_4 and
// min_ratio_vs_1.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/machine.h"
#include "jobs/job_client.h"
#include "client/local_cluster.h"
#include "core/cpu_count.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, mnist_dir, ".cache/mnist", "MNIST IDX files (./tessera data mnist)");
ABSL_FLAG(std::string, workers, "1,2,4,8", "worker counts to run, comma-separated");
ABSL_FLAG(int, epochs, 2, "epochs per run; the last one is measured");

namespace tessera {
namespace {

// The summed last-epoch samples/s of a run with `workers` workers, or the reason it failed.
absl::StatusOr<double> ClusterSamplesPerSecond(int workers) {
  const std::string run_dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("tessera-scaling-bench-", workers))
          .string();
  auto cluster = client::LocalCluster::Start(
      {.num_servers = 1, .num_workers = workers, .run_dir = run_dir, .pin_workers = true});
  if (!cluster.ok()) return cluster.status();
  auto job_client = jobs::JobClient::Connect((*cluster)->cluster(), absl::Seconds(60));
  if (!job_client.ok()) return job_client.status();
  const std::filesystem::path mnist = std::filesystem::absolute(absl::GetFlag(FLAGS_mnist_dir));
  JobSpec spec;
  spec.set_version(1);
  spec.set_name(absl::StrCat("scaling-bench-", workers));
  spec.set_model("lenet");
  spec.mutable_data()->set_kind("mnist");
  spec.mutable_data()->set_train_images((mnist / "train-images-idx3-ubyte").string());
  spec.mutable_data()->set_train_labels((mnist / "train-labels-idx1-ubyte").string());
  spec.set_batch_size(64);
  spec.set_num_epochs(absl::GetFlag(FLAGS_epochs));
  spec.set_optimizer("sgd");
  (*spec.mutable_optimizer_params())["learning_rate"] = "0.05";
  (*spec.mutable_optimizer_params())["momentum"] = "0.9";
  spec.set_kvstore("dist_sync");
  std::map<int, double> last_epoch;  // per worker rank
  auto outcome = (*job_client)->Run(spec, [&](int rank, const JobEvent& e) {
    if (e.has_epoch()) last_epoch[rank] = e.epoch().samples_per_second();
  });
  if (!outcome.ok()) return outcome.status();
  if (static_cast<int>(last_epoch.size()) != workers) {
    return absl::InternalError(
        absl::StrCat(last_epoch.size(), " of ", workers, " workers reported an epoch"));
  }
  double total = 0;
  for (const auto& [rank, samples] : last_epoch) total += samples;
  return total;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;  // NOLINT(build/namespaces)
  absl::SetProgramUsageMessage("LeNet dist_sync samples/s with 1, 2, 4, 8 pinned workers");
  absl::ParseCommandLine(argc, argv);
  std::vector<int> counts;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(w, &n) || n < 1) {
      std::fprintf(stderr, "scaling_bench: --workers: '%s' is not a worker count\n",
                   std::string(w).c_str());
      return 2;
    }
    counts.push_back(n);
  }
  const std::string cpu = bench::CpuModel(), isa = bench::CpuIsa();
  std::printf("machine: %s (%s), %d CPUs for the workers\n", cpu.c_str(), isa.c_str(),
              AvailableCpus());
  std::printf("%8s %14s %11s\n", "workers", "samples/s", "vs 1");
  nlohmann::json rows = nlohmann::json::array();
  std::map<int, double> by_count;
  for (int workers : counts) {
    absl::StatusOr<double> samples = ClusterSamplesPerSecond(workers);
    if (!samples.ok()) {
      std::fprintf(stderr, "scaling_bench: %d workers: %s\n", workers,
                   samples.status().ToString().c_str());
      return 1;
    }
    by_count[workers] = *samples;
    const double vs_one = by_count.count(1) ? *samples / by_count[1] : 0;
    std::printf("%8d %14.0f %11.2f\n", workers, *samples, vs_one);
    std::fflush(stdout);
    rows.push_back({{"workers", workers},
                    {"samples_per_s", *samples},
                    {"ratio_vs_1", by_count.count(1) ? nlohmann::json(vs_one) : nullptr}});
  }
  nlohmann::json json;
  json["bench"] = "scaling_bench";
  json["machine"] = {{"cpu", cpu}, {"cpu_isa", isa}, {"cpus", AvailableCpus()}};
  json["job"] = "lenet dist_sync, 1 server, batch 64 per worker, last epoch of " +
                std::to_string(absl::GetFlag(FLAGS_epochs));
  json["results"] = rows;
  json["ratio_8_vs_4"] = by_count.count(8) && by_count.count(4)
                             ? nlohmann::json(by_count[8] / by_count[4])
                             : nlohmann::json(nullptr);
  std::optional<double> min_vs_one;
  if (by_count.count(1)) {
    for (const auto& [workers, samples] : by_count) {
      min_vs_one = std::min(min_vs_one.value_or(samples / by_count[1]), samples / by_count[1]);
    }
  }
  json["min_ratio_vs_1"] = min_vs_one ? nlohmann::json(*min_vs_one) : nlohmann::json(nullptr);
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

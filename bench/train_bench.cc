// train_bench: training throughput (samples/s) of the MNIST MLP (784-128-64-10, ReLU) and
// LeNet at batch 64 on the CPU - SGD with momentum, forward + backward + update per batch,
// through Module - and in the same run the same models, data, batch size and thread count
// in PyTorch (bench/train_bench_pytorch.py; Debian's python3-torch, which
// bench/train_bench.setup installs). PyTorch runs twice: with OPENBLAS_NUM_THREADS=1 and
// torch.set_num_threads(ours), its fastest setting here, and with its defaults.
//
// Data: the first --batches * 64 digits of the MNIST training split in --mnist_dir (as
// `./tessera data mnist` writes), else seeded random data of the same shape (the speed does
// not depend on the values). Each side runs one warm-up pass and keeps the best of three.
// Last line: one JSON object with both figures, <model>_ratio_vs_pytorch (ours over PyTorch's
// samples/s with OPENBLAS_NUM_THREADS=1 and our thread count; > 1 means Tessera is faster)
// and <model>_ratio_vs_pytorch_best (over the faster of PyTorch's two runs), and pytorch_blas,
// the BLAS library PyTorch really called (the peer reads it from its process). Against the
// reference BLAS, a peer several times slower than this machine allows, the ratios are null.
//
// The distributed row: LeNet as a job on 1 tessera-ps + 2 tessera-worker processes
// (dist_sync, batch 64 per worker, each worker a warm-up epoch and three timed ones over its
// half of the MNIST training split; the daemons are built beside this program by
// train_bench.setup): per epoch the workers' samples/s summed, the best of the three timed
// epochs - as the one-process figure is the best of three passes after a warm-up (the first
// epoch's time includes connecting, initializing the keys and creating the kernels) -
// against the one-process LeNet figure:
// lenet_dist_overhead_ratio = one process / cluster (> 1: the cluster is slower in total), the
// one-process figure the mean of its runs before and after the cluster's (a shared VM's
// speed drifts by tens of percent within minutes).
// --rows picks the rows (mlp, lenet, dist; all by default). --amp=bfloat16 trains the mlp
// and lenet rows in mixed precision on both sides (graph/amp.h against torch.autocast).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/trainer_throughput.h"
#include "jobs/job_client.h"
#include "client/local_cluster.h"
#include "core/check.h"
#include "core/cpu_count.h"
#include "engine/create_engine.h"
#include "examples/models.h"
#include "io/mnist_iter.h"
#include "ndarray/runtime.h"
#include "nlohmann/json.hpp"
#include "train/module.h"

ABSL_FLAG(std::string, mnist_dir, ".cache/mnist", "the MNIST IDX files (random data without)");
ABSL_FLAG(int, batches, 100, "batches of 64 per timed pass");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "the Python that runs the PyTorch peer");
ABSL_FLAG(std::string, script, "bench/train_bench_pytorch.py", "the PyTorch peer");
ABSL_FLAG(std::string, amp, "",
          "bfloat16: both sides train the mlp and lenet rows in mixed precision (ours: graph/amp.h; "
          "PyTorch: torch.autocast on the CPU); empty: float32");
ABSL_FLAG(std::vector<std::string>, rows, std::vector<std::string>({"mlp", "lenet", "dist"}),
          "the rows to run: mlp, lenet, dist (dist needs lenet)");

namespace tessera {
namespace {

constexpr int kBatch = 64;

struct Flags {
  std::string mnist_dir;
  int batches = 0;
  std::string python;
  std::string script;
  std::vector<std::string> rows;
  std::string amp;
  bool Runs(std::string_view row) const { return absl::c_linear_search(rows, row); }
};

Flags ParseFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage("train_bench: Module training samples/s against PyTorch");
  absl::ParseCommandLine(argc, argv);
  Flags f{absl::GetFlag(FLAGS_mnist_dir), absl::GetFlag(FLAGS_batches), absl::GetFlag(FLAGS_python),
          absl::GetFlag(FLAGS_script), absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_amp)};
  if (!f.amp.empty() && f.amp != "bfloat16") {
    // PyTorch's CPU autocast runs bfloat16 only: no peer for float16 on the CPU.
    std::fprintf(stderr, "train_bench: --amp: '%s' has no CPU peer (bfloat16 has)\n", f.amp.c_str());
    std::exit(2);
  }
  if (!f.amp.empty() && f.Runs("dist")) {
    std::fprintf(stderr, "train_bench: --amp: the dist row runs in float32; pick --rows mlp,lenet\n");
    std::exit(2);
  }
  for (const std::string& row : f.rows) {
    if (row != "mlp" && row != "lenet" && row != "dist") {
      std::fprintf(stderr, "train_bench: --rows: unknown row '%s' (mlp, lenet, dist)\n",
                   row.c_str());
      std::exit(2);
    }
  }
  if (f.Runs("dist") && !f.Runs("lenet")) {
    std::fprintf(stderr, "train_bench: --rows: dist is compared with the lenet row; add it\n");
    std::exit(2);
  }
  if (f.batches < 1) {
    std::fprintf(stderr, "train_bench: --batches must be at least 1\n");
    std::exit(2);
  }
  return f;
}

bool HaveMnist(const Flags& f) {
  return std::filesystem::exists(f.mnist_dir + "/train-images-idx3-ubyte") &&
         std::filesystem::exists(f.mnist_dir + "/train-labels-idx1-ubyte");
}

// The batches both sides train on.
std::vector<io::DataBatch> Batches(const Runtime& rt, const Flags& f, bool flat) {
  std::vector<io::DataBatch> batches;
  if (HaveMnist(f)) {
    io::MNISTIterOptions o;
    o.image = f.mnist_dir + "/train-images-idx3-ubyte";
    o.label = f.mnist_dir + "/train-labels-idx1-ubyte";
    o.batch_size = kBatch;
    o.shuffle = false;
    o.flat = flat;
    o.silent = true;
    auto iter = io::MNISTIter::Create(rt, o);
    TESSERA_CHECK(iter.ok());
    while (static_cast<int>(batches.size()) < f.batches) {
      auto more = (*iter)->Next();
      TESSERA_CHECK(more.ok() && *more);
      batches.push_back((*iter)->Value());
    }
    return batches;
  }
  return bench::RandomBatches(rt, flat ? Shape{kBatch, 784} : Shape{kBatch, 1, 28, 28}, f.batches);
}

// What the PyTorch peer measured, and the BLAS it really ran on.
struct PeerResult {
  double samples_per_s = 0;  // 0 when it could not run
  std::string blas = "unknown", blas_library;
};

// Runs the PyTorch peer.
PeerResult RunPyTorch(const Flags& f, const std::string& model, int threads) {
  std::string command = absl::StrFormat("%s%s %s --model %s --batch %d --batches %d", threads > 0 ? "OPENBLAS_NUM_THREADS=1 " : "",
                                        f.python, f.script, model, kBatch, f.batches);
  if (threads > 0) absl::StrAppend(&command, " --threads ", threads);
  if (!f.amp.empty()) absl::StrAppend(&command, " --amp ", f.amp);
  if (HaveMnist(f)) {
    absl::StrAppend(&command, " --images ", f.mnist_dir, "/train-images-idx3-ubyte --labels ", f.mnist_dir,
                    "/train-labels-idx1-ubyte");
  }
  PeerResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::string out;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  if (pclose(pipe) != 0) {
    std::fprintf(stderr, "train_bench: the PyTorch peer failed (%s): %s\n", command.c_str(), out.c_str());
    return result;
  }
  const nlohmann::json report = nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
  if (report.is_discarded() || !report.contains("samples_per_s")) {
    std::fprintf(stderr, "train_bench: no JSON report from the PyTorch peer (%s): %s\n", command.c_str(),
                 out.c_str());
    return result;
  }
  result.samples_per_s = report.value("samples_per_s", 0.0);
  result.blas = report.value("blas", "unknown");
  result.blas_library = report.value("blas_library", "");
  return result;
}

// LeNet on a local cluster of 1 server and 2 workers; the workers' summed samples/s (0 when
// the cluster could not run: the reason goes to stderr).
double ClusterSamplesPerSecond(const Flags& f) {
  if (!HaveMnist(f)) return 0;
  const std::string run_dir = (std::filesystem::temp_directory_path() / "tessera-train-bench").string();
  auto cluster = client::LocalCluster::Start({.num_servers = 1, .num_workers = 2, .run_dir = run_dir});
  if (!cluster.ok()) {
    std::fprintf(stderr, "train_bench: no local cluster: %s\n", std::string(cluster.status().message()).c_str());
    return 0;
  }
  auto job_client = jobs::JobClient::Connect((*cluster)->cluster(), absl::Seconds(60));
  if (!job_client.ok()) return 0;
  JobSpec spec;
  spec.set_version(1);
  spec.set_name("train-bench-lenet");
  spec.set_model("lenet");
  spec.mutable_data()->set_kind("mnist");
  spec.mutable_data()->set_train_images(std::filesystem::absolute(f.mnist_dir + "/train-images-idx3-ubyte").string());
  spec.mutable_data()->set_train_labels(std::filesystem::absolute(f.mnist_dir + "/train-labels-idx1-ubyte").string());
  spec.set_batch_size(kBatch);
  constexpr int kWarmUpEpochs = 1, kTimedEpochs = 3;
  spec.set_num_epochs(kWarmUpEpochs + kTimedEpochs);
  spec.set_optimizer("sgd");
  (*spec.mutable_optimizer_params())["learning_rate"] = "0.05";
  (*spec.mutable_optimizer_params())["momentum"] = "0.9";
  spec.set_kvstore("dist_sync");
  std::vector<double> per_epoch(kWarmUpEpochs + kTimedEpochs, 0.0);  // summed over the workers
  auto outcome = (*job_client)->Run(spec, [&](int, const JobEvent& e) {
    if (e.has_epoch() && e.epoch().epoch() >= 0 && e.epoch().epoch() < static_cast<int>(per_epoch.size())) {
      per_epoch[e.epoch().epoch()] += e.epoch().samples_per_second();
    }
  });
  if (!outcome.ok()) {
    std::fprintf(stderr, "train_bench: the cluster job failed: %s\n", std::string(outcome.status().message()).c_str());
    return 0;
  }
  return *std::max_element(per_epoch.begin() + kWarmUpEpochs, per_epoch.end());
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;  // NOLINT(build/namespaces)
  const Flags flags = ParseFlags(argc, argv);
  // TESSERA_* variables (engine workers, OpenMP threads, profiler) apply, as in a worker.
  const absl::StatusOr<engine::EngineOptions> engine_options = engine::EngineOptions::FromEnv();
  if (!engine_options.ok()) {
    std::fprintf(stderr, "train_bench: %s\n",
                 std::string(engine_options.status().message()).c_str());
    return 2;
  }
  auto rt = OwnedRuntime::Create(*engine_options, engine::StorageOptions{}, 0);
  TESSERA_CHECK(rt.ok());
  const int threads = AvailableCpus();
  auto mlp = examples::MlpWithWidths({128, 64});
  auto lenet = examples::LeNet();
  TESSERA_CHECK(mlp.ok() && lenet.ok());
  std::printf("data: %s, %d batches of %d, %d threads, %s\n", HaveMnist(flags) ? flags.mnist_dir.c_str() : "random",
              flags.batches, kBatch, threads, flags.amp.empty() ? "float32" : flags.amp.c_str());
  std::printf("%-6s %16s %18s %20s %8s %10s\n", "model", "tessera samp/s", "pytorch samp/s", "pytorch default",
              "ratio", "vs best");
  std::string json = "{";
  double lenet_one_process = 0;
  std::string peer_blas;  // kind and library, as the first peer run reports it
  std::optional<graph::AmpOptions> amp;
  if (!flags.amp.empty()) amp = graph::AmpOptions{.dtype = DType::kBFloat16};
  for (const auto& [name, net, flat] : {std::tuple{"mlp", *mlp, true}, std::tuple{"lenet", *lenet, false}}) {
    if (!flags.Runs(name)) continue;
    const std::vector<io::DataBatch> batches = Batches((*rt)->get(), flags, flat);
    const double ours = bench::TrainerSamplesPerSecond((*rt)->get(), net, batches, amp);
    const PeerResult peer = RunPyTorch(flags, name, threads);
    const double torch = peer.samples_per_s;
    const double torch_default = RunPyTorch(flags, name, 0).samples_per_s;
    // A PyTorch on the reference BLAS runs several times slower than it can here: no ratio
    // against it (bench/train_bench.setup installs OpenBLAS).
    const bool fair = peer.blas != "reference" && peer.blas != "unknown";
    if (!fair) {
      std::fprintf(stderr,
                   "train_bench: the PyTorch peer runs on the %s BLAS (%s): no ratio against it; "
                   "install libopenblas0-pthread (bench/train_bench.setup does)\n",
                   peer.blas.c_str(), peer.blas_library.c_str());
    }
    const double ratio = fair && torch > 0 ? ours / torch : 0;
    // On some machines PyTorch's defaults beat the setting the issue names; report both.
    const double best = std::max(torch, torch_default);
    const double ratio_best = fair && best > 0 ? ours / best : 0;
    if (peer_blas.empty()) peer_blas = peer.blas + " " + peer.blas_library;
    if (std::string(name) == "lenet") lenet_one_process = ours;
    std::printf("%-6s %16.0f %18.0f %20.0f %8.2f %10.2f\n", name, ours, torch, torch_default, ratio, ratio_best);
    // (null, not 0, for a ratio refused against an unfair peer.)
    const auto ratio_json = [fair](double r) {
      return fair ? absl::StrFormat("%.3f", r) : std::string("null");
    };
    absl::StrAppendFormat(&json,
                          "%s\"%s_samples_per_s\": %.1f, \"%s_pytorch_samples_per_s\": %.1f, "
                          "\"%s_pytorch_default_samples_per_s\": %.1f, \"%s_ratio_vs_pytorch\": %s, "
                          "\"%s_ratio_vs_pytorch_best\": %s",
                          json.size() > 1 ? ", " : "", name, ours, name, torch, name, torch_default, name,
                          ratio_json(ratio), name, ratio_json(ratio_best));
  }
  if (flags.Runs("dist")) {
    const double cluster = ClusterSamplesPerSecond(flags);
    // The one-process figure again, right after the cluster: a shared machine's speed drifts
    // over a run, so the cluster is compared with the mean of the figures before and after.
    const double after =
        bench::TrainerSamplesPerSecond((*rt)->get(), *lenet, Batches((*rt)->get(), flags, false), amp);
    const double reference = (lenet_one_process + after) / 2;
    const double overhead = cluster > 0 ? reference / cluster : 0;
    std::printf(
        "lenet on 1 server + 2 workers (dist_sync): %.0f samples/s in total, overhead ratio %.2f "
        "(one process %.0f before, %.0f after)\n",
        cluster, overhead, lenet_one_process, after);
    absl::StrAppendFormat(
        &json,
        ", \"lenet_dist_2w1s_samples_per_s\": %.1f, \"lenet_one_process_after_samples_per_s\": %.1f, "
        "\"lenet_dist_overhead_ratio\": %.3f",
        cluster, after, overhead);
  }
  std::printf("%s, \"pytorch_blas\": \"%s\", \"threads\": %d, \"precision\": \"%s\"}\n", json.c_str(),
              peer_blas.c_str(), threads, flags.amp.empty() ? "float32" : flags.amp.c_str());
  return 0;
}

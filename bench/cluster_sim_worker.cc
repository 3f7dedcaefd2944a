// cluster_sim_worker: one worker of bench/cluster_sim.py's simulated cluster. It pushes and
// pulls the parameters of a real network (examples/models.h: their shapes from the symbol,
// each divided by --scale_down) through the dist KVStore, with --compute_ms of simulated
// forward and backward (a sleep: the CPU is not what is measured) before each round:
//   sleep(compute) -> PushPull(each parameter, last layer first, as Module::Update)
//                  -> wait for every parameter's new value.
// The cluster (rank, servers, TLS, token, bigarray bound) comes from the environment as for
// any Tessera worker (kvstore/dist_kvstore.h, DistKVStoreOptionsFromEnvironment). After
// --warmup rounds and a barrier it times --rounds rounds, then meets the others at a barrier
// again (--ready_dir lets the driver start the timed rounds). Last line: one JSON object with this worker's rank, its round times and the bytes
// it pushed per round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "examples/models.h"
#include "kvstore/dist_kvstore.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "resnet50", "resnet50, vgg16 or embedding_mlp");
ABSL_FLAG(int, scale_down, 1, "divide each parameter's elements by this (at least 1 element)");
ABSL_FLAG(double, compute_ms, 0, "simulated forward and backward per round, milliseconds");
ABSL_FLAG(int, rounds, 5, "timed rounds");
ABSL_FLAG(int, warmup, 1, "rounds before the timed ones");
ABSL_FLAG(std::string, mode, "dist_sync", "dist_sync or dist_async");
ABSL_FLAG(std::string, compression, "", "gradient compression: 2bit, fp16 or empty for none");
ABSL_FLAG(double, threshold, 0.5, "the 2bit compression's threshold");
ABSL_FLAG(std::string, job_id, "cluster-sim", "the run's identity, the same on every worker");
ABSL_FLAG(bool, list_parameters, false,
          "print {\"sizes\": [...]}, the parameters' scaled element counts in layer order, and "
          "exit (bench/cluster_sim_gloo.py allreduces the same)");
ABSL_FLAG(std::string, ready_dir, "",
          "after the warm-up, write ready-RANK here and wait for a file named go (the driver "
          "reads the links' counters in between); empty: start at once");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::vector<int64_t>> ParameterSizes(const std::string& model, int scale_down) {
  absl::StatusOr<graph::Symbol> net;
  std::map<std::string, Shape> inputs = {{"data", Shape{1, 3, 224, 224}}};
  if (model == "resnet50") {
    net = examples::ResNet50();
  } else if (model == "vgg16") {
    net = examples::Vgg16();
  } else if (model == "embedding_mlp") {
    net = examples::EmbeddingMlp();
    inputs = {{"data", Shape{1, 16}}};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", model, ": not resnet50, vgg16 or embedding_mlp"));
  }
  RETURN_IF_ERROR(net.status());
  ASSIGN_OR_RETURN(auto params, examples::ParameterShapes(*net, inputs));
  std::vector<int64_t> sizes;
  for (const auto& [name, shape] : params) {
    sizes.push_back(std::max<int64_t>(1, shape.Size() / scale_down));
  }
  return sizes;
}

absl::Status Run() {
  if (absl::GetFlag(FLAGS_scale_down) < 1) {
    return absl::InvalidArgumentError("--scale_down must be at least 1");
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> sizes,
                   ParameterSizes(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_scale_down)));
  if (absl::GetFlag(FLAGS_list_parameters)) {
    std::printf("%s\n", nlohmann::json({{"sizes", sizes}}).dump().c_str());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(kvstore::DistKVStoreOptions options,
                   kvstore::DistKVStoreOptionsFromEnvironment());
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.compression.set_type(absl::GetFlag(FLAGS_compression));
  if (options.compression.type() == "2bit") {
    options.compression.set_threshold(absl::GetFlag(FLAGS_threshold));
  }
  const int rank = options.cluster.index;
  ASSIGN_OR_RETURN(std::unique_ptr<OwnedRuntime> owned, OwnedRuntime::Create(/*seed=*/rank));
  const Runtime& rt = owned->get();
  ASSIGN_OR_RETURN(std::unique_ptr<kvstore::KVStore> kv,
                   kvstore::CreateDistKVStore(absl::GetFlag(FLAGS_mode), options));

  // Keys in layer order; gradients hold small values that vary per rank (2bit compression
  // then sends a mix of +, - and 0).
  std::vector<int> keys;
  std::vector<NDArray> values;
  std::vector<std::vector<NDArray>> grads, outs;
  int64_t bytes = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> fill(sizes[k]);
    for (size_t i = 0; i < fill.size(); ++i) {
      fill[i] = 0.001f * static_cast<float>(static_cast<int>((i * 7 + k + rank) % 2001) - 1000);
    }
    ASSIGN_OR_RETURN(NDArray grad, NDArray::Empty(rt, Shape{sizes[k]}));
    ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(rt, Shape{sizes[k]}));
    RETURN_IF_ERROR(grad.SyncCopyFromCPU(fill.data(), fill.size()));
    keys.push_back(static_cast<int>(k));
    values.push_back(grad);
    grads.push_back({grad});
    outs.push_back({out});
    bytes += sizes[k] * static_cast<int64_t>(sizeof(float));
  }
  RETURN_IF_ERROR(kv->Init(keys, values));
  const auto compute = std::chrono::duration<double, std::milli>(absl::GetFlag(FLAGS_compute_ms));

  // As Module::Update exchanges them: one PushPull per key (the server answers the push with
  // the round's value), later layers first and at higher priority.
  auto round = [&]() -> absl::Status {
    if (compute.count() > 0) std::this_thread::sleep_for(compute);
    for (int k = static_cast<int>(keys.size()) - 1; k >= 0; --k) {
      RETURN_IF_ERROR(kv->PushPull({k}, {grads[k]}, {outs[k]}, k));
    }
    for (const auto& out : outs) RETURN_IF_ERROR(out[0].WaitToRead());
    return absl::OkStatus();
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) RETURN_IF_ERROR(round());
  if (const std::string dir = absl::GetFlag(FLAGS_ready_dir); !dir.empty()) {
    RETURN_IF_ERROR(WriteStringToFile(absl::StrCat(dir, "/ready-", rank), ""));
    while (!std::filesystem::exists(absl::StrCat(dir, "/go"))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  RETURN_IF_ERROR(kv->Barrier());
  std::vector<double> seconds;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  for (int i = 0; i < absl::GetFlag(FLAGS_rounds); ++i) {
    RETURN_IF_ERROR(round());
    const Clock::time_point now = Clock::now();
    seconds.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  }
  const double total = std::chrono::duration<double>(last - start).count();
  RETURN_IF_ERROR(kv->Barrier());
  nlohmann::json report = {{"rank", rank},
                           {"model", absl::GetFlag(FLAGS_model)},
                           {"keys", keys.size()},
                           {"model_bytes", bytes},
                           {"rounds", seconds.size()},
                           {"seconds", total},
                           {"round_seconds", seconds}};
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = tessera::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "cluster_sim_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

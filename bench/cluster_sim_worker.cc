// cluster_sim_worker: one worker of bench/cluster_sim.py's simulated cluster. It pushes and
// pulls the parameters of a real network (examples/models.h: their shapes from the symbol,
// each divided by --scale_down) through the dist KVStore, with --compute_ms of simulated
// forward and backward per round (sleeps: the CPU is not what is measured), scheduled as
// --schedule says:
//   serial:  sleep(compute) -> PushPull(each parameter, last layer first) -> wait for every
//            parameter's new value;
//   layered: as Module runs a batch through the engine: the forward pass layer by layer, each
//            layer waiting only for its own parameters' new values; the backward pass in
//            reverse, each parameter's PushPull issued as soon as its layer's backward has
//            produced the gradient; the next batch's forward starts as soon as its first
//            layer's values are back. The compute splits 1/3 forward, 2/3 backward, across
//            the layers in proportion to their FLOPs (examples::ParameterFlops).
// --priority says which parameters are the most urgent on the wire: forward (MXNet's -index,
// what Module passes: the first layer's first) or backward (the last layer's first).
// A layered run first times --rounds rounds of communication alone (serial, no compute), so
// the report can say how much of it the compute hid.
// The cluster (rank, servers, TLS, token, bigarray bound) comes from the environment as for
// any Tessera worker (kvstore/dist_kvstore.h, DistKVStoreOptionsFromEnvironment). After
// --warmup rounds and a barrier it times --rounds rounds, then meets the others at a barrier
// again (--ready_dir lets the driver start the timed rounds and see their end). Last line:
// one JSON object with this worker's rank, its round times and the bytes it pushed per round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/daemon.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "examples/models.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/internal/compression.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "resnet50", "resnet50, vgg16 or embedding_mlp");
ABSL_FLAG(int, scale_down, 1, "divide each parameter's elements by this (at least 1 element)");
ABSL_FLAG(double, compute_ms, 0, "simulated forward and backward per round, milliseconds");
ABSL_FLAG(std::string, schedule, "serial", "serial or layered (see the header)");
ABSL_FLAG(std::string, priority, "forward", "forward (the first layer's keys most urgent) or backward");
ABSL_FLAG(int, rounds, 5, "timed rounds");
ABSL_FLAG(int, warmup, 1, "rounds before the timed ones");
ABSL_FLAG(std::string, mode, "dist_sync", "dist_sync or dist_async");
ABSL_FLAG(std::string, compression, "", "gradient compression: 2bit, fp16 or empty for none");
ABSL_FLAG(std::string, pull_type, "", "compression of the pulls: bf16 or empty for none");
ABSL_FLAG(double, threshold, 0.5, "the 2bit compression's threshold");
ABSL_FLAG(std::string, job_id, "cluster-sim", "the run's identity, the same on every worker");
ABSL_FLAG(bool, list_parameters, false,
          "print {\"sizes\": [...]}, the parameters' scaled element counts in layer order, and "
          "exit (bench/cluster_sim_gloo.py allreduces the same)");
ABSL_FLAG(bool, time_codec, false,
          "print one thread's seconds for the --compression / --pull_type codecs over all the "
          "parameters at --scale_down (1: the full model) as one JSON object, and exit "
          "(bench/cluster_sim.py adds what the scale-down takes off them)");
ABSL_FLAG(std::string, ready_dir, "",
          "after the warm-up, write ready-RANK here and wait for a file named go, and after the "
          "timed rounds write done-RANK (the driver reads the links' and CPUs' counters at "
          "both); empty: start at once");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Parameters {
  std::vector<int64_t> sizes;  // scaled element counts, layer order
  std::vector<double> flops;   // each one's share of the forward pass's work
};

absl::StatusOr<Parameters> ModelParameters(const std::string& model, int scale_down) {
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
  Parameters result;
  ASSIGN_OR_RETURN(result.flops, examples::ParameterFlops(*net, inputs));
  for (const auto& [name, shape] : params) {
    result.sizes.push_back(std::max<int64_t>(1, shape.Size() / scale_down));
  }
  return result;
}

// Simulated compute: holds the calling thread for `ms` milliseconds. A layered round is a
// few hundred of these, many far shorter than a sleep's own cost, so they are paid as a debt:
// a call sleeps only once at least 0.2 ms is owed, and what the sleep over- or undershot is
// carried to the next call (the passes run one function at a time, so the debt is never
// shared).
class SimulatedCompute {
 public:
  void operator()(double ms) {
    owed_ms_ += ms;
    if (owed_ms_ < 0.2) return;
    const Clock::time_point begin = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(owed_ms_));
    owed_ms_ -= std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  }

 private:
  double owed_ms_ = 0;
};

// The compression the flags ask for (--compression, --threshold for 2bit, --pull_type).
GradientCompression CompressionFromFlags() {
  GradientCompression c;
  c.set_type(absl::GetFlag(FLAGS_compression));
  if (c.type() == "2bit") c.set_threshold(absl::GetFlag(FLAGS_threshold));
  c.set_pull_type(absl::GetFlag(FLAGS_pull_type));
  return c;
}

// --time_codec: one thread's time for each codec step over `n` values (one buffer), the best
// of three runs each: a worker's push quantized and a pull widened, a server's push turned
// back into float32 and a pull's answer rounded. The simulation's transfers spend
// 1/scale_down of these; at full size they are what the CPUs add to a round.
absl::Status TimeCodec(const GradientCompression& c, int64_t n) {
  RETURN_IF_ERROR(kvstore::internal::CheckCompression(c));
  std::vector<float> grad(n), residual(n, 0.0f), values(n);
  uint64_t state = 1;
  for (float& g : grad) {  // uniform in [-1, 1): about half past a threshold of 0.5
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    g = static_cast<float>(static_cast<int64_t>(state >> 11) - (int64_t{1} << 52)) / 0x1p52f;
  }
  auto best_of_three = [](const std::function<void()>& step) {
    double best = 1e300;
    for (int i = 0; i < 3; ++i) {
      const Clock::time_point begin = Clock::now();
      step();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - begin).count());
    }
    return best;
  };
  nlohmann::json times = {{"values", n}, {"quantize_s", 0.0}, {"dequantize_s", 0.0},
                          {"pack_pull_s", 0.0}, {"unpack_pull_s", 0.0}};
  if (!c.type().empty()) {
    std::string packed(kvstore::internal::CompressedBytes(c, n), '\0');
    times["quantize_s"] = best_of_three([&] {
      kvstore::internal::CompressPush(c, grad.data(), residual.data(), n, packed.data());
    });
    times["dequantize_s"] = best_of_three(
        [&] { kvstore::internal::DecompressPush(c, packed.data(), n, values.data()); });
  }
  if (kvstore::internal::PullsInBFloat16(c)) {
    std::string packed(2 * static_cast<size_t>(n), '\0');
    times["pack_pull_s"] =
        best_of_three([&] { kvstore::internal::PackPull(grad.data(), n, packed.data()); });
    times["unpack_pull_s"] =
        best_of_three([&] { kvstore::internal::UnpackPull(packed.data(), n, values.data()); });
  }
  std::printf("%s\n", times.dump().c_str());
  return absl::OkStatus();
}

absl::Status Run() {
  if (absl::GetFlag(FLAGS_scale_down) < 1) {
    return absl::InvalidArgumentError("--scale_down must be at least 1");
  }
  const std::string schedule = absl::GetFlag(FLAGS_schedule);
  const std::string priority_order = absl::GetFlag(FLAGS_priority);
  if (schedule != "serial" && schedule != "layered") {
    return absl::InvalidArgumentError(absl::StrCat("--schedule=", schedule, ": not serial or layered"));
  }
  if (priority_order != "forward" && priority_order != "backward") {
    return absl::InvalidArgumentError(
        absl::StrCat("--priority=", priority_order, ": not forward or backward"));
  }
  ASSIGN_OR_RETURN(const Parameters model,
                   ModelParameters(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_scale_down)));
  const std::vector<int64_t>& sizes = model.sizes;
  if (absl::GetFlag(FLAGS_list_parameters)) {
    std::printf("%s\n", nlohmann::json({{"sizes", sizes}, {"flops", model.flops}}).dump().c_str());
    return absl::OkStatus();
  }
  if (absl::GetFlag(FLAGS_time_codec)) {
    int64_t n = 0;
    for (int64_t size : sizes) n += size;
    return TimeCodec(CompressionFromFlags(), n);
  }
  ASSIGN_OR_RETURN(kvstore::DistKVStoreOptions options,
                   kvstore::DistKVStoreOptionsFromEnvironment());
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.compression = CompressionFromFlags();
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
  const double compute_ms = absl::GetFlag(FLAGS_compute_ms);
  const auto priority = [&](int k) { return priority_order == "forward" ? -k : k; };
  // As Module::Update exchanges them: one PushPull per key (the server answers the push with
  // the round's value), later layers first.
  auto exchange = [&]() -> absl::Status {
    for (int k = static_cast<int>(keys.size()) - 1; k >= 0; --k) {
      RETURN_IF_ERROR(kv->PushPull({k}, {grads[k]}, {outs[k]}, priority(k)));
    }
    for (const auto& out : outs) RETURN_IF_ERROR(out[0].WaitToRead());
    return absl::OkStatus();
  };
  SimulatedCompute compute;
  auto serial = [&]() -> absl::Status {
    compute(compute_ms);
    return exchange();
  };
  // Layered: each layer's simulated forward and backward as an engine function on the
  // batch's activations (one variable: the passes run in order), reading the layer's
  // parameters (the new values of the last round: the forward waits for its own only) and
  // writing its gradient; the PushPull follows each backward.
  double total_flops = 0;
  for (double f : model.flops) total_flops += f;
  ASSIGN_OR_RETURN(NDArray activations, NDArray::Empty(rt, Shape{1}));
  engine::Engine* engine = rt.engine;
  // When each round's forward started and ended and its backward ended, for the waits the
  // report gives (the passes' functions run one at a time, in order).
  struct Marks {
    Clock::time_point forward_start, forward_end, backward_end;
  };
  std::vector<Marks> marks;
  marks.reserve(absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_rounds) + 1);  // never moved under a pass
  auto layered = [&]() -> absl::Status {
    const int n = static_cast<int>(keys.size());
    const size_t round_index = marks.size();
    marks.emplace_back();
    for (int k = 0; k < n; ++k) {
      const double ms = compute_ms / 3 * model.flops[k] / total_flops;
      RETURN_IF_ERROR(engine->PushSync(
          [ms, k, n, round_index, &compute, &marks](engine::RunContext) {
            if (k == 0) marks[round_index].forward_start = Clock::now();
            compute(ms);
            if (k == n - 1) marks[round_index].forward_end = Clock::now();
            return absl::OkStatus();
          },
          Context::CPU(), {outs[k][0].var()}, {activations.var()}, engine::FnProperty::kNormal, 0, "forward"));
    }
    for (int k = n - 1; k >= 0; --k) {
      const double ms = 2 * compute_ms / 3 * model.flops[k] / total_flops;
      RETURN_IF_ERROR(engine->PushSync([ms, k, round_index, &compute, &marks](engine::RunContext) {
                                         compute(ms);
                                         if (k == 0) marks[round_index].backward_end = Clock::now();
                                         return absl::OkStatus();
                                       },
                                       Context::CPU(), {outs[k][0].var()},
                                       {activations.var(), grads[k][0].var()},
                                       engine::FnProperty::kNormal, 0, "backward"));
      RETURN_IF_ERROR(kv->PushPull({k}, {grads[k]}, {outs[k]}, priority(k)));
    }
    // One batch ahead at most, as a training loop reading its outputs: this batch's passes.
    return activations.WaitToRead();
  };
  auto round = [&]() { return schedule == "layered" ? layered() : serial(); };
  auto drain = [&]() -> absl::Status {
    for (const auto& out : outs) RETURN_IF_ERROR(out[0].WaitToRead());
    return absl::OkStatus();
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) RETURN_IF_ERROR(round());
  RETURN_IF_ERROR(drain());
  if (const std::string dir = absl::GetFlag(FLAGS_ready_dir); !dir.empty()) {
    RETURN_IF_ERROR(WriteStringToFile(absl::StrCat(dir, "/ready-", rank), ""));
    while (!std::filesystem::exists(absl::StrCat(dir, "/go"))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  RETURN_IF_ERROR(kv->Barrier());
  // The communication alone first (a layered run's reference: how long the exchange takes
  // with nothing to hide it under).
  double exchange_seconds = 0;
  if (schedule == "layered") {
    const Clock::time_point begin = Clock::now();
    for (int i = 0; i < absl::GetFlag(FLAGS_rounds); ++i) RETURN_IF_ERROR(exchange());
    exchange_seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    RETURN_IF_ERROR(kv->Barrier());
  }
  std::vector<double> seconds;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  for (int i = 0; i < absl::GetFlag(FLAGS_rounds); ++i) {
    RETURN_IF_ERROR(round());
    const Clock::time_point now = Clock::now();
    seconds.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  }
  RETURN_IF_ERROR(drain());  // the last round's values are in
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  if (const std::string dir = absl::GetFlag(FLAGS_ready_dir); !dir.empty()) {
    RETURN_IF_ERROR(WriteStringToFile(absl::StrCat(dir, "/done-", rank), ""));
  }
  RETURN_IF_ERROR(kv->Barrier());
  // A layered round's waits, averaged over the timed rounds: for the first layer's new values
  // (from the backward pass's end to the next forward's start), and within each pass beyond
  // its compute.
  double first_layer_wait = 0, forward_wait = 0, backward_wait = 0;
  if (schedule == "layered" && absl::GetFlag(FLAGS_rounds) >= 2) {
    const size_t timed = std::min<size_t>(absl::GetFlag(FLAGS_rounds), marks.size());
    const size_t from = marks.size() - timed;
    auto s = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    for (size_t r = from; r < marks.size(); ++r) {
      // (Between the warm-up's last round and the first timed one the exchange was timed alone.)
      if (r > from) first_layer_wait += s(marks[r].forward_start - marks[r - 1].backward_end) / (timed - 1);
      forward_wait += (s(marks[r].forward_end - marks[r].forward_start) - compute_ms / 3000) / timed;
      backward_wait += (s(marks[r].backward_end - marks[r].forward_end) - compute_ms / 1500) / timed;
    }
  }
  nlohmann::json report = {{"rank", rank},
                           {"model", absl::GetFlag(FLAGS_model)},
                           {"keys", keys.size()},
                           {"model_bytes", bytes},
                           {"rounds", seconds.size()},
                           {"schedule", schedule},
                           {"priority", priority_order},
                           {"exchange_seconds", exchange_seconds},
                           {"first_layer_wait_seconds", first_layer_wait},
                           {"forward_wait_seconds", forward_wait},
                           {"backward_wait_seconds", backward_wait},
                           {"seconds", total},
                           {"round_seconds", seconds}};
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  tessera::ApplyMutexDeadlockDetectionFlag();  // as the worker daemon does
  const absl::Status status = tessera::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "cluster_sim_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

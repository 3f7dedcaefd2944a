#include "bench/trainer_throughput.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/status_macros.h"
#include "train/initializer.h"
#include "train/module.h"

namespace tessera::bench {

absl::StatusOr<double> MeasureTrainerSamplesPerSecond(const Runtime& rt, const graph::Symbol& net,
                                                      const std::vector<io::DataBatch>& batches,
                                                      const TrainerOptions& options) {
  if (batches.empty()) return absl::InvalidArgumentError("no batches to train on");
  train::Module mod(rt, net, {.contexts = {options.context}, .amp = options.amp});
  const io::DataBatch& first = batches[0];
  RETURN_IF_ERROR(
      mod.Bind({{"data", first.data[0].shape()}}, {{"softmax_label", first.label[0].shape()}}));
  RETURN_IF_ERROR(mod.InitParams(train::Xavier()));
  RETURN_IF_ERROR(mod.InitOptimizer("local", "sgd", options.sgd_params));
  // As Fit: one captured step where the module can (a GPU with CUDA graphs), else the three.
  const auto step = [&](const io::DataBatch& batch) -> absl::Status {
    ASSIGN_OR_RETURN(const bool stepped, mod.TrainStep(batch));
    if (stepped) return absl::OkStatus();
    RETURN_IF_ERROR(mod.Forward(batch, true));
    RETURN_IF_ERROR(mod.Backward());
    return mod.Update();
  };
  const size_t warmup =
      options.warmup_batches < 0 ? batches.size() : static_cast<size_t>(options.warmup_batches);
  for (size_t i = 0; i < warmup; ++i) RETURN_IF_ERROR(step(batches[i % batches.size()]));
  // Errors of pushed work (a kernel that failed on the device) surface here, not at the push.
  RETURN_IF_ERROR(rt.engine->WaitForAll());
  double best = 1e30;
  for (int pass = 0; pass < std::max(1, options.passes); ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (const io::DataBatch& batch : batches) RETURN_IF_ERROR(step(batch));
    // WaitForAll also synchronizes the engine's GPU streams: the pass ends when the device
    // is done, not when the last kernel was enqueued.
    RETURN_IF_ERROR(rt.engine->WaitForAll());
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (options.check_finite) {
    ASSIGN_OR_RETURN(std::vector<float> out, mod.executors()[0]->outputs()[0].AsVector<float>());
    const auto bad =
        std::find_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
    if (bad != out.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("after training, output element ", bad - out.begin(), " of ", out.size(),
                       " is ", *bad, ": the kernels compute garbage, the speed means nothing"));
    }
  }
  return static_cast<double>(batches.size()) * first.data[0].shape()[0] / best;
}

double TrainerSamplesPerSecond(const Runtime& rt, const graph::Symbol& net,
                               const std::vector<io::DataBatch>& batches,
                               std::optional<graph::AmpOptions> amp) {
  absl::StatusOr<double> samples = MeasureTrainerSamplesPerSecond(rt, net, batches, {.amp = amp});
  TESSERA_CHECK(samples.ok());
  return *samples;
}

absl::StatusOr<std::vector<io::DataBatch>> MakeRandomBatches(const Runtime& rt,
                                                             const Shape& data_shape, int count,
                                                             Context ctx) {
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> pixel(0, 1);
  const int64_t batch = data_shape[0];
  std::vector<io::DataBatch> batches;
  std::vector<float> x(data_shape.Size()), y(batch);
  for (int b = 0; b < count; ++b) {
    for (float& v : x) v = pixel(rng);
    for (float& v : y) v = static_cast<float>(rng() % 10);
    ASSIGN_OR_RETURN(NDArray data, FromVector<float>(rt, data_shape, x, ctx));
    ASSIGN_OR_RETURN(NDArray label, FromVector<float>(rt, Shape{batch}, y, ctx));
    batches.push_back({{data}, {label}});
  }
  return batches;
}

std::vector<io::DataBatch> RandomBatches(const Runtime& rt, const Shape& data_shape, int count) {
  absl::StatusOr<std::vector<io::DataBatch>> batches =
      MakeRandomBatches(rt, data_shape, count, Context::CPU());
  TESSERA_CHECK(batches.ok());
  return *std::move(batches);
}

}  // namespace tessera::bench

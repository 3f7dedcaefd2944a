#include "bench/trainer_throughput.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "core/check.h"
#include "train/initializer.h"
#include "train/module.h"

namespace tessera::bench {

double TrainerSamplesPerSecond(const Runtime& rt, const graph::Symbol& net,
                               const std::vector<io::DataBatch>& batches) {
  train::Module mod(rt, net);
  const io::DataBatch& first = batches[0];
  TESSERA_CHECK(mod.Bind({{"data", first.data[0].shape()}},
                         {{"softmax_label", first.label[0].shape()}})
                    .ok());
  TESSERA_CHECK(mod.InitParams(train::Xavier()).ok());
  TESSERA_CHECK(
      mod.InitOptimizer("local", "sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}).ok());
  const auto pass = [&] {
    for (const io::DataBatch& batch : batches) {
      TESSERA_CHECK(mod.Forward(batch, true).ok());
      TESSERA_CHECK(mod.Backward().ok());
      TESSERA_CHECK(mod.Update().ok());
    }
    TESSERA_CHECK(rt.engine->WaitForAll().ok());
  };
  pass();  // warm-up
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                              .count());
  }
  return static_cast<double>(batches.size()) * first.data[0].shape()[0] / best;
}

std::vector<io::DataBatch> RandomBatches(const Runtime& rt, const Shape& data_shape, int count) {
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> pixel(0, 1);
  const int64_t batch = data_shape[0];
  std::vector<io::DataBatch> batches;
  for (int b = 0; b < count; ++b) {
    std::vector<float> x(data_shape.Size()), y(batch);
    for (float& v : x) v = pixel(rng);
    for (float& v : y) v = static_cast<float>(rng() % 10);
    auto data = FromVector<float>(rt, data_shape, x);
    auto label = FromVector<float>(rt, Shape{batch}, y);
    TESSERA_CHECK(data.ok() && label.ok());
    batches.push_back({{*data}, {*label}});
  }
  return batches;
}

}  // namespace tessera::bench

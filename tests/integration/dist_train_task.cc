#include "tests/integration/dist_train_task.h"

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "examples/models.h"
#include "io/ndarray_iter.h"
#include "train/initializer.h"
#include "train/metric.h"
#include "train/module.h"

namespace tessera::integration {
namespace {

struct Dataset {
  std::vector<float> x;  // kSamples x kFeatures
  std::vector<float> y;  // kSamples
};

Dataset MakeDataset(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Dataset d;
  d.x.resize(kSamples * kFeatures);
  d.y.resize(kSamples);
  for (float& v : d.x) v = normal(rng);
  for (int i = 0; i < kSamples; ++i) {
    float best = -1e30f;
    for (int c = 0; c < kClasses; ++c) {
      float score = 0;
      for (int j = 0; j < kFeatures; ++j) {
        score += d.x[i * kFeatures + j] * static_cast<float>(((c + 1) * (j + 2)) % 5 - 2);
      }
      if (score > best) best = score, d.y[i] = static_cast<float>(c);
    }
  }
  return d;
}

template <typename T>
io::HostArray Host(std::string name, Shape shape, const std::vector<T>& values) {
  io::HostArray a{std::move(name), std::move(shape), DType::kFloat32, {}};
  a.bytes.resize(values.size() * sizeof(T));
  std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

// An iterator over `rows` of the dataset, in that order, in batches of `batch`.
absl::StatusOr<std::unique_ptr<io::NDArrayIter>> Iter(const Runtime& rt, const Dataset& d,
                                                      const std::vector<int>& rows, int batch) {
  std::vector<float> x, y;
  for (int r : rows) {
    x.insert(x.end(), d.x.begin() + r * kFeatures, d.x.begin() + (r + 1) * kFeatures);
    y.push_back(d.y[r]);
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  return io::NDArrayIter::FromHost(
      rt, {Host("data", Shape{n, kFeatures}, x)}, {Host("softmax_label", Shape{n}, y)},
      {.batch_size = batch, .shuffle = false, .last_batch_handle = "discard"});
}

}  // namespace

absl::StatusOr<std::map<std::string, NDArray>> TrainTask(const Runtime& rt,
                                                         const TaskOptions& options) {
  const int global_batch = options.num_workers * options.batch_size;
  if (options.batch_size < 1 || kSamples % global_batch != 0 || options.rank < 0 ||
      options.rank >= options.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainTask: ", options.num_workers, " workers at batch ", options.batch_size,
                     " do not split ", kSamples, " samples (rank ", options.rank, ")"));
  }
  const int batches = kSamples / global_batch - options.skip_last_batches;
  if (batches < 1) return absl::InvalidArgumentError("TrainTask: no batches left to train on");
  std::vector<int> rows;
  for (int t = 0; t < batches; ++t) {
    for (int i = 0; i < options.batch_size; ++i) {
      rows.push_back(t * global_batch + options.rank * options.batch_size + i);
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<io::NDArrayIter> iter,
                   Iter(rt, MakeDataset(options.data_seed), rows, options.batch_size));
  ASSIGN_OR_RETURN(graph::Symbol net, examples::MlpWithWidths({kHidden}, kClasses));
  train::Module module(rt, net);
  train::FitOptions fit;
  fit.num_epoch = options.num_epoch;
  fit.kvstore = options.kvstore;
  fit.optimizer = "sgd";
  fit.optimizer_params = {{"learning_rate", absl::StrCat(options.learning_rate)},
                          {"momentum", absl::StrCat(options.momentum)}};
  fit.seed = options.init_seed;
  if (options.batch_end) {
    fit.batch_end_callback = [&](const train::BatchEndParam& p) {
      options.batch_end(p.epoch, p.nbatch);
    };
  }
  if (options.epoch_end) {
    fit.epoch_end_callback = [&](int epoch, const auto& train, const auto&) {
      options.epoch_end(epoch, train[0].second);
      return absl::OkStatus();
    };
  }
  RETURN_IF_ERROR(module.Fit(iter.get(), nullptr, fit));
  return module.GetArgParams();
}

absl::StatusOr<Score> Evaluate(const Runtime& rt, const std::map<std::string, NDArray>& params,
                               uint64_t data_seed) {
  std::vector<int> rows(kSamples);
  for (int i = 0; i < kSamples; ++i) rows[i] = i;
  ASSIGN_OR_RETURN(std::unique_ptr<io::NDArrayIter> iter,
                   Iter(rt, MakeDataset(data_seed), rows, kSamples));
  ASSIGN_OR_RETURN(graph::Symbol net, examples::MlpWithWidths({kHidden}, kClasses));
  train::Module module(rt, net);
  RETURN_IF_ERROR(module.Bind(iter->provide_data(), iter->provide_label(), /*for_training=*/false));
  RETURN_IF_ERROR(module.InitParams(train::Xavier(), params));
  Score score;
  for (auto [spec, out] :
       {std::pair{"acc", &score.accuracy}, std::pair{"ce", &score.cross_entropy}}) {
    ASSIGN_OR_RETURN(std::unique_ptr<train::EvalMetric> metric, train::CreateMetric(spec));
    using Values = std::vector<std::pair<std::string, double>>;
    ASSIGN_OR_RETURN(Values values, module.Score(iter.get(), metric.get()));
    *out = values.at(0).second;
  }
  return score;
}

}  // namespace tessera::integration

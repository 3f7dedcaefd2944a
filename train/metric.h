// Evaluation metrics, as MXNet's mx.metric: accumulated over batches of (labels,
// predictions) host arrays, read with Get, cleared with Reset.
//
// Predictions are (batch, classes) probabilities for the classification metrics and any
// shape matching the labels for MSE; labels hold class indices (as floats) or targets.
// `num_valid` lets the last, padded batch count only its real rows.
#ifndef TESSERA_TRAIN_METRIC_H_
#define TESSERA_TRAIN_METRIC_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ndarray/ndarray.h"

namespace tessera::train {

class EvalMetric {
 public:
  explicit EvalMetric(std::string name) : name_(std::move(name)) {}
  virtual ~EvalMetric() = default;

  // Waits for the arrays. `num_valid` < 0 means every row. Mismatched shapes are
  // INVALID_ARGUMENT naming the metric and both shapes.
  absl::Status Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds,
                      int num_valid = -1);
  virtual void Reset() {
    sum_ = 0;
    count_ = 0;
  }
  // (name, value); the value is NaN before any update.
  virtual std::vector<std::pair<std::string, double>> Get() const;
  const std::string& name() const { return name_; }
  // The running sums behind Get(), one (sum, count) per metric, and their restore: what a
  // checkpoint taken mid-epoch keeps so that the resumed epoch reports the same values.
  // RestoreTotals of a different length is INVALID_ARGUMENT naming both.
  virtual std::vector<std::pair<double, int64_t>> Totals() const { return {{sum_, count_}}; }
  virtual absl::Status RestoreTotals(const std::vector<std::pair<double, int64_t>>& totals);

 protected:
  friend class CompositeMetric;
  // Adds one (label, prediction) pair of `rows` rows to sum_/count_.
  virtual absl::Status UpdateOne(const std::vector<float>& label, const Shape& label_shape,
                                 const std::vector<float>& pred, const Shape& pred_shape, int rows) = 0;
  std::string name_;
  double sum_ = 0;
  int64_t count_ = 0;
};

class Accuracy : public EvalMetric {
 public:
  Accuracy() : EvalMetric("accuracy") {}

 private:
  absl::Status UpdateOne(const std::vector<float>& label, const Shape& label_shape, const std::vector<float>& pred,
                         const Shape& pred_shape, int rows) override;
};

class TopKAccuracy : public EvalMetric {
 public:
  explicit TopKAccuracy(int k);

 private:
  absl::Status UpdateOne(const std::vector<float>& label, const Shape& label_shape, const std::vector<float>& pred,
                         const Shape& pred_shape, int rows) override;
  int k_;
};

// Mean of -log(p[label]) (p clipped at 1e-12, as MXNet's eps).
class CrossEntropy : public EvalMetric {
 public:
  CrossEntropy() : EvalMetric("cross-entropy") {}

 private:
  absl::Status UpdateOne(const std::vector<float>& label, const Shape& label_shape, const std::vector<float>& pred,
                         const Shape& pred_shape, int rows) override;
};

// Mean over rows of the mean squared error of the row.
class MSE : public EvalMetric {
 public:
  MSE() : EvalMetric("mse") {}

 private:
  absl::Status UpdateOne(const std::vector<float>& label, const Shape& label_shape, const std::vector<float>& pred,
                         const Shape& pred_shape, int rows) override;
};

// Several metrics updated together.
class CompositeMetric : public EvalMetric {
 public:
  explicit CompositeMetric(std::vector<std::unique_ptr<EvalMetric>> metrics);
  void Reset() override;
  std::vector<std::pair<std::string, double>> Get() const override;
  std::vector<std::pair<double, int64_t>> Totals() const override;
  absl::Status RestoreTotals(const std::vector<std::pair<double, int64_t>>& totals) override;

 private:
  absl::Status UpdateOne(const std::vector<float>& label, const Shape& label_shape, const std::vector<float>& pred,
                         const Shape& pred_shape, int rows) override;
  std::vector<std::unique_ptr<EvalMetric>> metrics_;
};

// "acc"/"accuracy", "top_k_accuracy_K" (e.g. top_k_accuracy_5), "ce"/"cross-entropy", "mse";
// a comma-separated list makes a composite. INVALID_ARGUMENT naming an unknown metric.
absl::StatusOr<std::unique_ptr<EvalMetric>> CreateMetric(const std::string& spec);

}  // namespace tessera::train

#endif  // TESSERA_TRAIN_METRIC_H_

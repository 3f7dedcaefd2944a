#include "train/metric.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace tessera::train {
namespace {

absl::Status CheckClassification(const std::string& metric, const Shape& label_shape, const Shape& pred_shape) {
  if (pred_shape.ndim() != 2 || label_shape.Size() != pred_shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(metric, ": predictions ", pred_shape.ToString(),
                                                   " must be (batch, classes) for labels ", label_shape.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ClassOf(const std::string& metric, float label, int64_t classes) {
  const int64_t c = static_cast<int64_t>(label);
  if (c < 0 || c >= classes || c != label) {
    return absl::InvalidArgumentError(absl::StrCat(metric, ": label ", label, " is not a class in [0, ", classes, ")"));
  }
  return c;
}

}  // namespace

absl::Status EvalMetric::Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds,
                                int num_valid) {
  if (labels.size() != preds.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", labels.size(), " label arrays but ", preds.size(), " prediction arrays"));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    using Floats = std::vector<float>;
    ASSIGN_OR_RETURN(Floats label, labels[i].AsVector<float>());
    ASSIGN_OR_RETURN(Floats pred, preds[i].AsVector<float>());
    const int rows = static_cast<int>(preds[i].shape()[0]);
    RETURN_IF_ERROR(UpdateOne(label, labels[i].shape(), pred, preds[i].shape(),
                              num_valid < 0 ? rows : std::min(rows, num_valid)));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, double>> EvalMetric::Get() const {
  return {{name_, count_ == 0 ? std::numeric_limits<double>::quiet_NaN() : sum_ / count_}};
}

absl::Status Accuracy::UpdateOne(const std::vector<float>& label, const Shape& label_shape,
                                 const std::vector<float>& pred, const Shape& pred_shape, int rows) {
  RETURN_IF_ERROR(CheckClassification(name_, label_shape, pred_shape));
  const int64_t classes = pred_shape[1];
  for (int r = 0; r < rows; ++r) {
    const float* p = pred.data() + r * classes;
    const int64_t best = std::max_element(p, p + classes) - p;
    ASSIGN_OR_RETURN(int64_t want, ClassOf(name_, label[r], classes));
    sum_ += best == want;
    ++count_;
  }
  return absl::OkStatus();
}

TopKAccuracy::TopKAccuracy(int k) : EvalMetric(absl::StrCat("top_k_accuracy_", k)), k_(k) {}

absl::Status TopKAccuracy::UpdateOne(const std::vector<float>& label, const Shape& label_shape,
                                     const std::vector<float>& pred, const Shape& pred_shape, int rows) {
  RETURN_IF_ERROR(CheckClassification(name_, label_shape, pred_shape));
  const int64_t classes = pred_shape[1];
  for (int r = 0; r < rows; ++r) {
    const float* p = pred.data() + r * classes;
    ASSIGN_OR_RETURN(int64_t want, ClassOf(name_, label[r], classes));
    // In the top k when fewer than k classes score higher (ties counted in its favour).
    int64_t higher = 0;
    for (int64_t c = 0; c < classes; ++c) higher += p[c] > p[want];
    sum_ += higher < k_;
    ++count_;
  }
  return absl::OkStatus();
}

absl::Status CrossEntropy::UpdateOne(const std::vector<float>& label, const Shape& label_shape,
                                     const std::vector<float>& pred, const Shape& pred_shape, int rows) {
  RETURN_IF_ERROR(CheckClassification(name_, label_shape, pred_shape));
  const int64_t classes = pred_shape[1];
  for (int r = 0; r < rows; ++r) {
    ASSIGN_OR_RETURN(int64_t want, ClassOf(name_, label[r], classes));
    sum_ -= std::log(std::max(1e-12, static_cast<double>(pred[r * classes + want])));
    ++count_;
  }
  return absl::OkStatus();
}

absl::Status MSE::UpdateOne(const std::vector<float>& label, const Shape& label_shape, const std::vector<float>& pred,
                            const Shape& pred_shape, int rows) {
  if (label.size() != pred.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": labels ", label_shape.ToString(), " and predictions ",
                                                   pred_shape.ToString(), " differ in size"));
  }
  const int64_t per_row = static_cast<int64_t>(pred.size()) / std::max<int64_t>(1, pred_shape[0]);
  for (int r = 0; r < rows; ++r) {
    double se = 0;
    for (int64_t i = r * per_row; i < (r + 1) * per_row; ++i) se += (pred[i] - label[i]) * (pred[i] - label[i]);
    sum_ += se / per_row;
    ++count_;
  }
  return absl::OkStatus();
}

absl::Status EvalMetric::RestoreTotals(const std::vector<std::pair<double, int64_t>>& totals) {
  if (totals.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric '", name_, "': ", totals.size(), " totals for 1 metric"));
  }
  sum_ = totals[0].first;
  count_ = totals[0].second;
  return absl::OkStatus();
}

CompositeMetric::CompositeMetric(std::vector<std::unique_ptr<EvalMetric>> metrics)
    : EvalMetric("composite"), metrics_(std::move(metrics)) {}

void CompositeMetric::Reset() {
  for (auto& m : metrics_) m->Reset();
}

std::vector<std::pair<std::string, double>> CompositeMetric::Get() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& m : metrics_) {
    for (auto& v : m->Get()) out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::pair<double, int64_t>> CompositeMetric::Totals() const {
  std::vector<std::pair<double, int64_t>> out;
  for (const auto& m : metrics_) {
    for (const auto& t : m->Totals()) out.push_back(t);
  }
  return out;
}

absl::Status CompositeMetric::RestoreTotals(
    const std::vector<std::pair<double, int64_t>>& totals) {
  if (totals.size() != metrics_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("metric '", name_, "': ", totals.size(),
                                                   " totals for ", metrics_.size(), " metrics"));
  }
  for (size_t i = 0; i < metrics_.size(); ++i) {
    RETURN_IF_ERROR(metrics_[i]->RestoreTotals({totals[i]}));
  }
  return absl::OkStatus();
}

absl::Status CompositeMetric::UpdateOne(const std::vector<float>& label, const Shape& label_shape,
                                        const std::vector<float>& pred, const Shape& pred_shape, int rows) {
  for (auto& m : metrics_) RETURN_IF_ERROR(m->UpdateOne(label, label_shape, pred, pred_shape, rows));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EvalMetric>> CreateMetric(const std::string& spec) {
  std::vector<std::string> names = absl::StrSplit(spec, ',', absl::SkipWhitespace());
  if (names.size() > 1) {
    std::vector<std::unique_ptr<EvalMetric>> metrics;
    for (const std::string& n : names) {
      ASSIGN_OR_RETURN(std::unique_ptr<EvalMetric> m, CreateMetric(n));
      metrics.push_back(std::move(m));
    }
    return std::make_unique<CompositeMetric>(std::move(metrics));
  }
  const std::string name = names.empty() ? "" : names[0];
  if (name == "acc" || name == "accuracy") return std::make_unique<Accuracy>();
  if (name == "ce" || name == "cross-entropy") return std::make_unique<CrossEntropy>();
  if (name == "mse") return std::make_unique<MSE>();
  int k = 0;
  if (absl::StartsWith(name, "top_k_accuracy_") && absl::SimpleAtoi(name.substr(15), &k) && k > 0) {
    return std::make_unique<TopKAccuracy>(k);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown metric '", name,
                                                 "' (acc, top_k_accuracy_K, ce, mse, or a comma-separated list)"));
}

}  // namespace tessera::train

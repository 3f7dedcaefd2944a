// Metrics against hand-computed values, padding, and errors.
#include "train/metric.h"

#include <cmath>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ndarray/test_util.h"

namespace tessera::train {
namespace {

using ::testing::HasSubstr;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;

class MetricTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kNaive); }
  NDArray Array(const Shape& shape, const std::vector<float>& v) {
    auto a = FromVector<float>(owned_->get(), shape, v);
    TESSERA_CHECK(a.ok());
    return *a;
  }
  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(MetricTest, ClassificationMetrics) {
  // Three rows, three classes; labels 2, 0, 1.
  const NDArray pred = Array({3, 3}, {0.1f, 0.2f, 0.7f, 0.5f, 0.3f, 0.2f, 0.6f, 0.3f, 0.1f});
  const NDArray label = Array({3}, {2, 0, 1});
  Accuracy acc;
  ASSERT_THAT(acc.Update({label}, {pred}), IsOk());
  EXPECT_DOUBLE_EQ(acc.Get()[0].second, 2.0 / 3);
  TopKAccuracy top2(2);
  ASSERT_THAT(top2.Update({label}, {pred}), IsOk());
  EXPECT_DOUBLE_EQ(top2.Get()[0].second, 1.0);
  EXPECT_EQ(top2.Get()[0].first, "top_k_accuracy_2");
  CrossEntropy ce;
  ASSERT_THAT(ce.Update({label}, {pred}), IsOk());
  EXPECT_NEAR(ce.Get()[0].second, -(std::log(0.7) + std::log(0.5) + std::log(0.3)) / 3, 1e-6);
  // Padding: only the first row counts.
  Accuracy padded;
  ASSERT_THAT(padded.Update({label}, {pred}, 1), IsOk());
  EXPECT_DOUBLE_EQ(padded.Get()[0].second, 1.0);
  // Accumulates over batches until Reset.
  ASSERT_THAT(acc.Update({label}, {pred}), IsOk());
  EXPECT_DOUBLE_EQ(acc.Get()[0].second, 4.0 / 6);
  acc.Reset();
  EXPECT_TRUE(std::isnan(acc.Get()[0].second));
}

TEST_F(MetricTest, MeanSquaredErrorAndComposite) {
  MSE mse;
  ASSERT_THAT(mse.Update({Array({2, 2}, {1, 2, 3, 4})}, {Array({2, 2}, {1, 0, 3, 5})}), IsOk());
  EXPECT_DOUBLE_EQ(mse.Get()[0].second, (4.0 / 2 + 1.0 / 2) / 2);
  auto both = CreateMetric("acc,ce");
  ASSERT_THAT(both.status(), IsOk());
  ASSERT_THAT((*both)->Update({Array({1}, {0})}, {Array({1, 2}, {0.8f, 0.2f})}), IsOk());
  const auto values = (*both)->Get();
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0].first, "accuracy");
  EXPECT_DOUBLE_EQ(values[0].second, 1.0);
  EXPECT_NEAR(values[1].second, -std::log(0.8), 1e-6);
}

TEST_F(MetricTest, Errors) {
  EXPECT_THAT(CreateMetric("f1").status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'f1'")));
  Accuracy acc;
  EXPECT_THAT(acc.Update({Array({2}, {0, 1})}, {Array({3, 2}, {0, 0, 0, 0, 0, 0})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(3,2)")));
  EXPECT_THAT(acc.Update({Array({1}, {5})}, {Array({1, 2}, {0, 1})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label 5")));
}

}  // namespace
}  // namespace tessera::train

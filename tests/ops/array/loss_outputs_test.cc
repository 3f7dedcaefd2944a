// Loss heads (Linear/Logistic/MAE RegressionOutput, MakeLoss) and BlockGrad: forward against
// float64 references, backward against the analytic gradients (they ignore out_grad, so
// finite differences of out_grad . out do not apply), shapes and dependencies.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/array/array_test_util.h"

namespace tessera::ops::testing {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

void ExpectAllNear(const Values& got, const Values& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << i;
}

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct RegressionCase {
  std::string op;
  double (*forward)(double);
  double (*grad)(double out, double label);
};

TEST(RegressionOutputTest, ForwardAndGradient) {
  const RegressionCase cases[] = {
      {"LinearRegressionOutput", [](double x) { return x; },
       [](double o, double l) { return o - l; }},
      {"LogisticRegressionOutput", Sigmoid, [](double o, double l) { return o - l; }},
      {"MAERegressionOutput", [](double x) { return x; },
       [](double o, double l) { return o > l ? 1.0 : -1.0; }},
  };
  for (const RegressionCase& rc : cases) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      auto c = MakeChecker(rc.op, {{"grad_scale", "0.5"}}, {{4, 3}}, dtype);
      ASSERT_NE(c, nullptr) << rc.op;
      EXPECT_EQ(c->in_shapes()[1], (Shape{4, 3}));
      c->SkipGradient(1);
      c->CheckForward([&](const auto& in, const auto&) {
        Values y(in[0].size());
        for (size_t i = 0; i < y.size(); ++i) y[i] = rc.forward(in[0][i]);
        return std::vector<Values>{y};
      });
      const Values og(12, 100.0);  // must be ignored
      auto g = c->Backward({og});
      ASSERT_THAT(g, IsOk());
      Values want(12);
      for (int i = 0; i < 12; ++i) {
        // grad_scale / (outputs per example = 3)
        want[i] = rc.grad(rc.forward(c->input(0)[i]), c->input(1)[i]) * 0.5 / 3;
      }
      ExpectAllNear(g->at(0), want, dtype == DType::kFloat64 ? 1e-12 : 1e-6);
      ExpectAllNear(g->at(1), Values(12, 0.0), 0);
    }
  }
}

TEST(RegressionOutputTest, BackwardReadsLabelAndOutputOnly) {
  auto prop = OpRegistry::Global().Create("LinearRegressionOutput", {});
  ASSERT_THAT(prop, IsOk());
  // ids: out_grad 0, data 1, label 2, output 3.
  EXPECT_EQ((*prop)->DeclareBackwardDependency({0}, {1, 2}, {3}), (std::vector<int>{2, 3}));
}

TEST(RegressionOutputTest, LabelShapes) {
  std::vector<Shape> in = {{4, 1}, {4}}, out;
  auto known = InferShapes("LinearRegressionOutput", {}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  EXPECT_EQ(out[0], (Shape{4, 1}));
  in = {{4, 3}, {3, 4}};
  out = {{}};
  EXPECT_THAT(InferShapes("LogisticRegressionOutput", {}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("LogisticRegressionOutput"), HasSubstr("label"),
                             HasSubstr("(3,4)"), HasSubstr("(4,3)"))));
  in = {{}, {}};
  out = {{}};
  known = InferShapes("LinearRegressionOutput", {}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_FALSE(*known);
  EXPECT_THAT(OpRegistry::Global().Create("LinearRegressionOutput", {{"grad_scale", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad_scale")));
}

TEST(MakeLossTest, Normalizations) {
  struct Case {
    std::string normalization;
    double want;  // the gradient of every element
  };
  // data (4, 5) with 3 elements above valid_thresh 0.5 (set below).
  for (const Case& tc : {Case{"null", 2.0}, Case{"batch", 2.0 / 4}, Case{"valid", 2.0 / 3}}) {
    auto c = MakeChecker(
        "MakeLoss",
        {{"grad_scale", "2"}, {"normalization", tc.normalization}, {"valid_thresh", "0.5"}},
        {{4, 5}});
    ASSERT_NE(c, nullptr);
    Values data(20, 0.1);
    data[2] = data[7] = data[19] = 0.9;
    c->SetInput(0, data);
    c->CheckForward([](const auto& in, const auto&) { return std::vector<Values>{in[0]}; });
    auto g = c->Backward({Values(20, -3.0)});
    ASSERT_THAT(g, IsOk());
    ExpectAllNear(g->at(0), Values(20, tc.want), 1e-12);
  }
}

TEST(MakeLossTest, ValidCountIsAtLeastOne) {
  auto c = MakeChecker("MakeLoss", {{"normalization", "valid"}, {"valid_thresh", "5"}}, {{6}});
  ASSERT_NE(c, nullptr);
  auto g = c->Backward({Values(6, 1.0)});
  ASSERT_THAT(g, IsOk());
  ExpectAllNear(g->at(0), Values(6, 1.0), 0);
  EXPECT_THAT(OpRegistry::Global().Create("MakeLoss", {{"normalization", "mean"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("normalization")));
}

TEST(BlockGradTest, IdentityForwardZeroGradient) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kInt32}) {
    auto c = MakeChecker("BlockGrad", {}, {{3, 4}}, dtype);
    ASSERT_NE(c, nullptr);
    if (dtype == DType::kInt32) {
      Values v(12);
      for (int i = 0; i < 12; ++i) v[i] = i - 6;
      c->SetInput(0, v);
    }
    c->CheckForward([](const auto& in, const auto&) { return std::vector<Values>{in[0]}; });
    auto g = c->Backward({Values(12, 5.0)});
    ASSERT_THAT(g, IsOk());
    ExpectAllNear(g->at(0), Values(12, 0.0), 0);
  }
  auto prop = OpRegistry::Global().Create("BlockGrad", {});
  ASSERT_THAT(prop, IsOk());
  EXPECT_TRUE((*prop)->DeclareBackwardDependency({0}, {1}, {2}).empty());
}

}  // namespace
}  // namespace tessera::ops::testing

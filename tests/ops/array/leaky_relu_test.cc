// LeakyReLU: every act_type against float64 references, gradients by finite differences,
// and shape/type/parameter errors.
#include <cmath>
#include <memory>
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

std::vector<Values> LeakyRef(const std::vector<Values>& in, double slope) {
  Values y(in[0].size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = in[0][i] > 0 ? in[0][i] : slope * in[0][i];
  return {y};
}

TEST(LeakyReLUTest, LeakyForwardAndBackward) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    auto c =
        MakeChecker("LeakyReLU", {{"act_type", "leaky"}, {"slope", "0.1"}}, {{2, 3, 5}}, dtype);
    ASSERT_NE(c, nullptr);
    c->CheckForward([](const auto& in, const auto&) { return LeakyRef(in, 0.1); });
    if (dtype == DType::kFloat64) {
      c->CheckBackward();
    } else {
      c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
    }
  }
}

TEST(LeakyReLUTest, DefaultSlopeIsQuarter) {
  auto c = MakeChecker("LeakyReLU", {}, {{4, 6}});
  ASSERT_NE(c, nullptr);
  c->CheckForward([](const auto& in, const auto&) { return LeakyRef(in, 0.25); });
}

TEST(LeakyReLUTest, NegativeSlopeReadsInputAndIsNotInPlace) {
  auto c = MakeChecker("LeakyReLU", {{"slope", "-0.5"}}, {{3, 4}});
  ASSERT_NE(c, nullptr);
  // With a negative slope the output is positive on both sides of 0, so backward must read
  // the input, which an in-place forward would have overwritten.
  EXPECT_TRUE(c->prop().ForwardInplaceOption({0}, {0}).empty());
  c->CheckForward([](const auto& in, const auto&) { return LeakyRef(in, -0.5); });
  c->CheckBackward();
}

TEST(LeakyReLUTest, Elu) {
  auto c = MakeChecker("LeakyReLU", {{"act_type", "elu"}, {"slope", "0.7"}}, {{2, 7}});
  ASSERT_NE(c, nullptr);
  c->CheckForward([](const auto& in, const auto&) {
    Values y(in[0].size());
    for (size_t i = 0; i < y.size(); ++i) {
      y[i] = in[0][i] > 0 ? in[0][i] : 0.7 * (std::exp(in[0][i]) - 1);
    }
    return std::vector<Values>{y};
  });
  c->CheckBackward();
}

TEST(LeakyReLUTest, Selu) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    // slope is ignored: selu's alpha and lambda are fixed.
    auto c = MakeChecker("LeakyReLU", {{"act_type", "selu"}, {"slope", "0.3"}}, {{3, 7}}, dtype);
    ASSERT_NE(c, nullptr);
    c->CheckForward([](const auto& in, const auto&) {
      const double alpha = 1.6732632423543772, lambda = 1.0507009873554805;
      Values y(in[0].size());
      for (size_t i = 0; i < y.size(); ++i) {
        const double x = in[0][i];
        y[i] = lambda * (x > 0 ? x : alpha * (std::exp(x) - 1));
      }
      return std::vector<Values>{y};
    });
    if (dtype == DType::kFloat64) {
      c->CheckBackward();
    } else {
      c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
    }
  }
}

TEST(LeakyReLUTest, GeluReadsInputAndIsNotInPlace) {
  auto c = MakeChecker("LeakyReLU", {{"act_type", "gelu"}}, {{4, 9}}, DType::kFloat64);
  ASSERT_NE(c, nullptr);
  // Not monotonic below 0: the gradient cannot be recovered from the output.
  EXPECT_TRUE(c->prop().ForwardInplaceOption({0}, {0}).empty());
  // Inputs spread over [-3, 3], past gelu's minimum near -0.75.
  Values x(c->input(0).size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = -3 + 6.0 * (static_cast<double>(i) + 0.5) / x.size();
  c->SetInput(0, x);
  c->CheckForward([](const auto& in, const auto&) {
    Values y(in[0].size());
    for (size_t i = 0; i < y.size(); ++i) {
      const double v = in[0][i];
      y[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    }
    return std::vector<Values>{y};
  });
  c->CheckBackward();
}

TEST(LeakyReLUTest, GeluFloat32) {
  auto c = MakeChecker("LeakyReLU", {{"act_type", "gelu"}}, {{2, 3, 5}}, DType::kFloat32);
  ASSERT_NE(c, nullptr);
  c->CheckForward(
      [](const auto& in, const auto&) {
        Values y(in[0].size());
        for (size_t i = 0; i < y.size(); ++i) {
          y[i] = 0.5 * in[0][i] * (1 + std::erf(in[0][i] / std::sqrt(2.0)));
        }
        return std::vector<Values>{y};
      },
      {.rtol = 1e-5, .atol = 1e-6});
  c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
}

TEST(LeakyReLUTest, PReLUPerChannelGamma) {
  auto c = MakeChecker("LeakyReLU", {{"act_type", "prelu"}}, {{2, 3, 4}});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->in_shapes()[1], (Shape{3}));
  c->CheckForward([](const auto& in, const auto& shapes) {
    Values y(in[0].size());
    for (size_t i = 0; i < y.size(); ++i) {
      const double g = in[1][(i / 4) % 3];
      y[i] = in[0][i] > 0 ? in[0][i] : g * in[0][i];
    }
    return std::vector<Values>{y};
  });
  c->CheckBackward();  // gradients of data and gamma
}

// A gamma of one element is one slope for every channel, as MXNet broadcasts it (Gluon's
// PReLU exports such a gamma).
TEST(LeakyReLUTest, PReLUSharedGamma) {
  auto c = MakeChecker("LeakyReLU", {{"act_type", "prelu"}}, {{2, 3, 4}, {1}});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->in_shapes()[1], (Shape{1}));
  c->CheckForward([](const auto& in, const auto& shapes) {
    Values y(in[0].size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = in[0][i] > 0 ? in[0][i] : in[1][0] * in[0][i];
    return std::vector<Values>{y};
  });
  c->CheckBackward();  // the gamma gradient sums over every element
}

TEST(LeakyReLUTest, PReLUFloat32Backward) {
  auto c = MakeChecker("LeakyReLU", {{"act_type", "prelu"}}, {{3, 2, 2, 2}}, DType::kFloat32);
  ASSERT_NE(c, nullptr);
  c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
}

TEST(LeakyReLUTest, RReLUInferenceUsesMidpointSlope) {
  auto c = MakeChecker("LeakyReLU",
                       {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.3"}},
                       {{5, 4}});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->prop().NumVisibleOutputs(), 1);
  c->CheckForward([](const auto& in, const auto&) { return LeakyRef(in, 0.2); }, {},
                  /*is_train=*/false);
}

TEST(LeakyReLUTest, RReLUTrainingSlopesLieInBounds) {
  auto c = MakeChecker("LeakyReLU",
                       {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.3"}},
                       {{50, 40}});
  ASSERT_NE(c, nullptr);
  auto out = c->Forward(/*is_train=*/true);
  ASSERT_THAT(out, IsOk());
  double lo = 1, hi = 0;
  for (size_t i = 0; i < out->at(0).size(); ++i) {
    const double x = c->input(0)[i];
    if (x > 0) {
      EXPECT_EQ(out->at(0)[i], x);
    } else {
      const double s = out->at(0)[i] / x;
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
  }
  EXPECT_GE(lo, 0.1 - 1e-12);
  EXPECT_LE(hi, 0.3 + 1e-12);
  EXPECT_LT(lo, 0.12);  // ~1000 negative elements spread over the whole range
  EXPECT_GT(hi, 0.28);
}

TEST(LeakyReLUTest, RReLUBackwardWithFixedSlope) {
  // Equal bounds make the random slope deterministic, so finite differences apply.
  auto c = MakeChecker("LeakyReLU",
                       {{"act_type", "rrelu"}, {"lower_bound", "0.2"}, {"upper_bound", "0.2"}},
                       {{3, 5}});
  ASSERT_NE(c, nullptr);
  c->CheckBackward();
}

TEST(LeakyReLUTest, HalfTypesComputeInFloat) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    auto c = MakeChecker("LeakyReLU", {{"act_type", "elu"}}, {{4, 8}}, dtype);
    ASSERT_NE(c, nullptr);
    c->CheckForward(
        [](const auto& in, const auto&) {
          Values y(in[0].size());
          for (size_t i = 0; i < y.size(); ++i) {
            y[i] = in[0][i] > 0 ? in[0][i] : 0.25 * (std::exp(in[0][i]) - 1);
          }
          return std::vector<Values>{y};
        },
        {.rtol = 2e-2, .atol = 1e-2});
  }
}

TEST(LeakyReLUTest, ShapeInference) {
  std::vector<Shape> in = {{}, {}}, out;
  EXPECT_THAT(InferShapes("LeakyReLU", {{"act_type", "prelu"}}, &in, &out), IsOk());
  in = {{}, {}};
  out = {{}};
  auto known = InferShapes("LeakyReLU", {{"act_type", "prelu"}}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_FALSE(*known);

  in = {{2, 3, 4}, {5}};
  EXPECT_THAT(
      InferShapes("LeakyReLU", {{"act_type", "prelu"}}, &in, &out),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("LeakyReLU"), HasSubstr("gamma"),
                                                         HasSubstr("(3,)"), HasSubstr("(5,)"))));

  // The output's shape determines the data's.
  in = {{}};
  out = {{6, 2}};
  known = InferShapes("LeakyReLU", {}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  EXPECT_EQ(in[0], (Shape{6, 2}));
}

TEST(LeakyReLUTest, IntegerTypesAreRejected) {
  auto prop = OpRegistry::Global().Create("LeakyReLU", {});
  ASSERT_THAT(prop, IsOk());
  std::vector<DType> in = {DType::kInt32}, out = {DType::kUnknown}, aux;
  EXPECT_THAT((*prop)->InferType(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("LeakyReLU"), HasSubstr("int32"))));
}

TEST(LeakyReLUTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("LeakyReLU", {{"act_type", "swish"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("act_type"), HasSubstr("swish"))));
  EXPECT_THAT(
      OpRegistry::Global().Create(
          "LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "0.5"}, {"upper_bound", "0.1"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lower_bound")));
  EXPECT_THAT(OpRegistry::Global().Create("LeakyReLU", {{"slope", "abc"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slope")));
}

}  // namespace
}  // namespace tessera::ops::testing

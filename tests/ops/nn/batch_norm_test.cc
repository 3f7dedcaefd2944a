// BatchNorm: training (batch statistics, moving-average update) and inference (moving
// statistics) against a float64 reference, fix_gamma and use_global_stats, the hidden
// mean / var outputs, backward against finite differences, inference errors.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/registry.h"
#include "tests/ops/op_check.h"

namespace tessera::ops {
namespace {

using ::tessera::ops::testing::OpChecker;
using ::tessera::ops::testing::Tolerance;
using ::tessera::ops::testing::Values;
using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kEps = 1e-3;
constexpr Tolerance kForwardTol{.rtol = 1e-4, .atol = 1e-5};
constexpr Tolerance kGradTol{.rtol = 3e-2, .atol = 3e-3};

// (outer, channels, inner) of shape s around the channel axis.
struct ChannelView {
  int64_t n, c, rest;
};
ChannelView ViewOf(const Shape& s, int axis) {
  if (axis < 0) axis += s.ndim();
  return {s.ProdRange(0, axis), s[axis], s.ProdRange(axis + 1, s.ndim())};
}

// Per-channel mean and biased variance of x (outer, C, inner).
void Stats(const Values& x, const ChannelView& v, Values* mean, Values* var) {
  const int64_t n = v.n, c = v.c, rest = v.rest;
  mean->assign(c, 0);
  var->assign(c, 0);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rest; ++r) (*mean)[ch] += x[(i * c + ch) * rest + r];
    (*mean)[ch] /= n * rest;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rest; ++r) {
        const double d = x[(i * c + ch) * rest + r] - (*mean)[ch];
        (*var)[ch] += d * d;
      }
    (*var)[ch] /= n * rest;
  }
}

// in: data, gamma, beta, moving_mean, moving_var. Outputs: out (+ mean, var if visible).
std::vector<Values> Reference(const std::vector<Values>& in, const std::vector<Shape>& shapes,
                              bool batch_stats, bool fix_gamma, bool mean_var_visible,
                              int axis = 1) {
  const ChannelView v = ViewOf(shapes[0], axis);
  const int64_t c = v.c, rest = v.rest;
  Values mean = in[3], var = in[4];
  if (batch_stats) Stats(in[0], v, &mean, &var);
  Values out(in[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t ch = (static_cast<int64_t>(i) / rest) % c;
    const double g = fix_gamma ? 1 : in[1][ch];
    out[i] = g * (in[0][i] - mean[ch]) / std::sqrt(var[ch] + kEps) + in[2][ch];
  }
  if (mean_var_visible) return {out, mean, var};
  return {out};
}

struct BnCase {
  Shape shape;
  bool fix_gamma = false;
  bool use_global_stats = false;
  bool output_mean_var = false;
  int axis = 1;
};

std::unique_ptr<OpChecker> Make(const BnCase& b) {
  auto checker = OpChecker::Create("BatchNorm",
                                   {{"eps", absl::StrCat(kEps)},
                                    {"fix_gamma", b.fix_gamma ? "true" : "false"},
                                    {"use_global_stats", b.use_global_stats ? "true" : "false"},
                                    {"output_mean_var", b.output_mean_var ? "true" : "false"},
                                    {"axis", absl::StrCat(b.axis)}},
                                   {b.shape});
  EXPECT_THAT(checker, IsOk());
  if (!checker.ok()) return nullptr;
  // A variance must be positive.
  Values var = (*checker)->aux(1);
  for (double& v : var) v = std::abs(v) + 0.5;
  (*checker)->SetAux(1, var);
  return std::move(*checker);
}

void CheckTrainAndInference(const BnCase& b) {
  SCOPED_TRACE(absl::StrCat(b.shape.ToString(), " fix_gamma=", b.fix_gamma,
                            " use_global_stats=", b.use_global_stats, " axis=", b.axis));
  auto checker = Make(b);
  ASSERT_NE(checker, nullptr);
  for (bool is_train : {true, false}) {
    const bool batch_stats = is_train && !b.use_global_stats;
    checker->CheckForward(
        [&](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
          return Reference(in, shapes, batch_stats, b.fix_gamma, b.output_mean_var, b.axis);
        },
        kForwardTol, is_train);
  }
  if (!b.output_mean_var) checker->CheckBackward(kGradTol, 1e-3);
}

TEST(BatchNormTest, Train4D) { CheckTrainAndInference({.shape = Shape{4, 3, 2, 3}}); }
TEST(BatchNormTest, FixGamma) {
  CheckTrainAndInference({.shape = Shape{3, 2, 3, 2}, .fix_gamma = true});
}
TEST(BatchNormTest, GlobalStats) {
  CheckTrainAndInference({.shape = Shape{2, 4, 3}, .use_global_stats = true});
}
TEST(BatchNormTest, ChannelAxisLastOrInTheMiddle) {
  CheckTrainAndInference({.shape = Shape{3, 2, 4}, .axis = -1});  // NWC
  CheckTrainAndInference({.shape = Shape{2, 3, 4, 2}, .axis = 2});
  CheckTrainAndInference({.shape = Shape{2, 3, 4, 5, 2, 2}, .axis = 1});  // beyond 5-D
  CheckTrainAndInference({.shape = Shape{5, 3}, .use_global_stats = true, .axis = 0});
}
TEST(BatchNormTest, TwoDimensional) { CheckTrainAndInference({.shape = Shape{6, 5}}); }
TEST(BatchNormTest, OutputMeanVar) {
  CheckTrainAndInference({.shape = Shape{3, 2, 4}, .output_mean_var = true});
}

// A batch this large runs on the threads its call may use (RunContext::cpu_threads), with
// primitives made for each thread count: oneDNN sizes its per-thread statistics scratch
// when it makes one. Every count computes the same.
TEST(BatchNormTest, LargeBatchOnEveryThreadCount) {
  const BnCase b{.shape = Shape{8, 16, 40, 40}};  // 204,800 floats: two threads and more
  auto checker = Make(b);
  ASSERT_NE(checker, nullptr);
  const Values out_grad = testing::RandomValues(b.shape.Size(), checker->rng());
  std::vector<Values> first_grads;
  checker->ForEachThreadCount([&] {
    checker->CheckForward(
        [&](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
          return Reference(in, shapes, /*batch_stats=*/true, false, false);
        },
        kForwardTol, /*is_train=*/true);
    auto grads = checker->Backward({out_grad});
    ASSERT_THAT(grads, IsOk());
    if (first_grads.empty()) {
      first_grads = *grads;
      return;
    }
    for (size_t g = 0; g < first_grads.size(); ++g) {
      for (size_t i = 0; i < first_grads[g].size(); ++i) {
        ASSERT_NEAR((*grads)[g][i], first_grads[g][i], 1e-4 * (1 + std::abs(first_grads[g][i])))
            << "gradient " << g << " element " << i;
      }
    }
  });
}

TEST(BatchNormTest, FixGammaHasZeroGammaGradient) {
  auto checker = Make({.shape = Shape{2, 3, 2, 2}, .fix_gamma = true});
  ASSERT_NE(checker, nullptr);
  auto grads = checker->Backward({Values(24, 0.5)});
  ASSERT_THAT(grads, IsOk());
  EXPECT_THAT((*grads)[1], ::testing::Each(0.0));
}

TEST(BatchNormTest, TrainingUpdatesMovingStatistics) {
  auto prop_checker = Make({.shape = Shape{4, 2, 3}});
  ASSERT_NE(prop_checker, nullptr);
  OpChecker& c = *prop_checker;
  const Values x = c.input(0), mm = c.aux(0), mv = c.aux(1);
  Values mean, var;
  Stats(x, ViewOf(Shape{4, 2, 3}, 1), &mean, &var);
  ASSERT_THAT(c.Forward(/*is_train=*/true), IsOk());
  for (int ch = 0; ch < 2; ++ch) {
    EXPECT_NEAR(c.aux(0)[ch], 0.9 * mm[ch] + 0.1 * mean[ch], 1e-5);
    EXPECT_NEAR(c.aux(1)[ch], 0.9 * mv[ch] + 0.1 * var[ch], 1e-5);
  }
  // Inference leaves them alone.
  const Values after_mean = c.aux(0), after_var = c.aux(1);
  ASSERT_THAT(c.Forward(/*is_train=*/false), IsOk());
  EXPECT_EQ(c.aux(0), after_mean);
  EXPECT_EQ(c.aux(1), after_var);
}

TEST(BatchNormTest, InfersShapesAndNamesMismatch) {
  auto prop = OpRegistry::Global().Create("BatchNorm", {});
  ASSERT_THAT(prop, IsOk());
  EXPECT_EQ((*prop)->NumVisibleOutputs(), 1);
  EXPECT_EQ((*prop)->ListAuxiliaryStates(),
            (std::vector<std::string>{"moving_mean", "moving_var"}));
  std::vector<Shape> in{Shape{8, 16, 4, 4}, Shape{}, Shape{}}, out(3), aux(2);
  auto known = (*prop)->InferShape(&in, &out, &aux);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  EXPECT_EQ(in[1], Shape{16});
  EXPECT_EQ(aux[1], Shape{16});
  EXPECT_EQ(out[2], Shape{16});
  std::vector<Shape> bad{Shape{8, 16, 4, 4}, Shape{15}, Shape{}};
  EXPECT_THAT(
      (*prop)->InferShape(&bad, &out, &aux),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("BatchNorm"), HasSubstr("gamma"),
                                                         HasSubstr("(16,)"), HasSubstr("(15,)"))));
  auto last = OpRegistry::Global().Create("BatchNorm", {{"axis", "-1"}});
  ASSERT_THAT(last, IsOk());
  std::vector<Shape> nhwc{Shape{8, 4, 4, 16}, Shape{}, Shape{}}, nhwc_out(3), nhwc_aux(2);
  ASSERT_THAT((*last)->InferShape(&nhwc, &nhwc_out, &nhwc_aux), IsOk());
  EXPECT_EQ(nhwc[1], Shape{16});
  auto far = OpRegistry::Global().Create("BatchNorm", {{"axis", "4"}});
  ASSERT_THAT(far, IsOk());
  std::vector<Shape> four{Shape{8, 16, 4, 4}, Shape{}, Shape{}}, four_out(3), four_aux(2);
  EXPECT_THAT((*far)->InferShape(&four, &four_out, &four_aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("axis 4"), HasSubstr("(8,16,4,4)"))));
  EXPECT_THAT(OpRegistry::Global().Create("BatchNorm", {{"momentum", "1.5"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("momentum")));
}

}  // namespace
}  // namespace tessera::ops

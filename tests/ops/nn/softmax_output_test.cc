// SoftmaxOutput: softmax forward against float64 (every OpReqType, in place), and the loss
// gradient (softmax - onehot(label)) * grad_scale / normalizer that ignores out_grad, with
// multi_output, ignore_label, each normalization and label smoothing; label shape and range
// errors.
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

struct LossCase {
  Shape data;
  bool multi_output = false;
  bool use_ignore = false;
  double ignore_label = -1;
  std::string normalization = "null";
  double grad_scale = 1;
  double smooth_alpha = 0;
};

// Softmax over axis 1 of (outer, classes, inner).
Values Softmax(const Values& x, int64_t outer, int64_t classes, int64_t inner) {
  Values p(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(x[(o * classes + c) * inner + i]);
      for (int64_t c = 0; c < classes; ++c) {
        p[(o * classes + c) * inner + i] = std::exp(x[(o * classes + c) * inner + i]) / sum;
      }
    }
  return p;
}

void Check(const LossCase& t) {
  SCOPED_TRACE(absl::StrCat(t.data.ToString(), " multi=", t.multi_output, " ignore=", t.use_ignore,
                            " norm=", t.normalization, " alpha=", t.smooth_alpha));
  auto checker = OpChecker::Create("SoftmaxOutput",
                                   {{"multi_output", t.multi_output ? "true" : "false"},
                                    {"use_ignore", t.use_ignore ? "true" : "false"},
                                    {"ignore_label", absl::StrCat(t.ignore_label)},
                                    {"normalization", t.normalization},
                                    {"grad_scale", absl::StrCat(t.grad_scale)},
                                    {"smooth_alpha", absl::StrCat(t.smooth_alpha)}},
                                   {t.data});
  ASSERT_THAT(checker, IsOk());
  OpChecker& c = **checker;
  const int64_t outer = t.data[0];
  const int64_t classes = t.multi_output ? t.data[1] : t.data.ProdRange(1, t.data.ndim());
  const int64_t inner = t.multi_output ? t.data.ProdRange(2, t.data.ndim()) : 1;
  ASSERT_EQ(c.in_shapes()[1].Size(), outer * inner);
  Values labels(outer * inner);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<double>(i % classes);
  c.SetInput(1, labels);
  c.SkipGradient(1);
  c.CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        return std::vector<Values>{Softmax(in[0], outer, classes, inner)};
      },
      Tolerance{.rtol = 1e-5, .atol = 1e-6});

  auto grads = c.Backward({Values(t.data.Size(), 3.0)});  // out_grad is ignored
  ASSERT_THAT(grads, IsOk());
  const Values p = Softmax(c.input(0), outer, classes, inner);
  double normalizer = 1;
  if (t.normalization == "batch") normalizer = static_cast<double>(outer);
  if (t.normalization == "valid") {
    int valid = 0;
    for (double l : labels) valid += l != t.ignore_label;
    normalizer = std::max(valid, 1);
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const double l = labels[o * inner + i];
      for (int64_t k = 0; k < classes; ++k) {
        const int64_t idx = (o * classes + k) * inner + i;
        const double want = t.use_ignore && l == t.ignore_label
                                ? 0.0
                                : (p[idx] - (k == l ? 1 - t.smooth_alpha
                                                    : t.smooth_alpha / (classes - 1))) *
                                      t.grad_scale / normalizer;
        EXPECT_NEAR((*grads)[0][idx], want, 1e-5) << "element " << idx;
      }
    }
  EXPECT_THAT((*grads)[1], ::testing::Each(0.0));
}

TEST(SoftmaxOutputTest, Basic) { Check({.data = Shape{4, 5}, .grad_scale = 2}); }
TEST(SoftmaxOutputTest, FlattensAndBatchNormalizes) {
  Check({.data = Shape{3, 2, 3}, .normalization = "batch"});
}
TEST(SoftmaxOutputTest, IgnoreLabelValid) {
  Check({.data = Shape{6, 3}, .use_ignore = true, .ignore_label = 1, .normalization = "valid"});
}
TEST(SoftmaxOutputTest, MultiOutput) {
  Check({.data = Shape{2, 3, 2, 2}, .multi_output = true, .normalization = "batch"});
}
TEST(SoftmaxOutputTest, MultiOutputIgnore) {
  Check({.data = Shape{2, 4, 3},
         .multi_output = true,
         .use_ignore = true,
         .ignore_label = 2,
         .normalization = "valid",
         .grad_scale = 0.5});
}

TEST(SoftmaxOutputTest, LabelSmoothing) {
  Check({.data = Shape{4, 5}, .smooth_alpha = 0.1});
  Check({.data = Shape{2, 3, 2},
         .multi_output = true,
         .use_ignore = true,
         .ignore_label = 0,
         .normalization = "valid",
         .smooth_alpha = 0.3});
}

TEST(SoftmaxOutputTest, SmoothAlphaOutsideZeroOneIsAnError) {
  for (const char* alpha : {"-0.1", "1.5"}) {
    EXPECT_THAT(OpRegistry::Global().Create("SoftmaxOutput", {{"smooth_alpha", alpha}}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("smooth_alpha")));
  }
}

TEST(SoftmaxOutputTest, LabelOutOfRange) {
  auto checker = OpChecker::Create("SoftmaxOutput", {}, {Shape{2, 3}});
  ASSERT_THAT(checker, IsOk());
  (*checker)->SetInput(1, {0, 3});
  EXPECT_THAT((*checker)->Backward({Values(6, 1.0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("SoftmaxOutput"), HasSubstr("label 3"))));
}

TEST(SoftmaxOutputTest, LabelShapeMismatch) {
  auto prop = OpRegistry::Global().Create("SoftmaxOutput", {{"multi_output", "true"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{2, 3, 4}, Shape{2, 3}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("label"), HasSubstr("(2,4)"), HasSubstr("(2,3)"))));
  EXPECT_THAT(OpRegistry::Global().Create("SoftmaxOutput", {{"normalization", "sum"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("normalization")));
}

}  // namespace
}  // namespace tessera::ops

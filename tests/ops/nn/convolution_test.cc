// Convolution and Deconvolution: forward against naive float64 loops, backward against
// finite differences (every OpReqType through OpChecker) over stride / pad / dilate /
// groups / no_bias / adj, and shape-inference and parameter errors.
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

constexpr Tolerance kForwardTol{.rtol = 1e-4, .atol = 1e-5};
constexpr Tolerance kGradTol{.rtol = 2e-2, .atol = 2e-3};

struct ConvCase {
  int64_t n, c, h, w, filters, kh, kw;
  int64_t stride = 1, pad = 0, dilate = 1, groups = 1, adj = 0;
  bool no_bias = false;
};

KwArgs Kwargs(const ConvCase& k, bool deconv) {
  KwArgs kw = {{"kernel", absl::StrCat("(", k.kh, ",", k.kw, ")")},
               {"stride", absl::StrCat("(", k.stride, ",", k.stride, ")")},
               {"pad", absl::StrCat("(", k.pad, ",", k.pad, ")")},
               {"dilate", absl::StrCat("(", k.dilate, ",", k.dilate, ")")},
               {"num_filter", absl::StrCat(k.filters)},
               {"num_group", absl::StrCat(k.groups)},
               {"no_bias", k.no_bias ? "true" : "false"}};
  if (deconv) kw.push_back({"adj", absl::StrCat("(", k.adj, ",", k.adj, ")")});
  return kw;
}

// out[n, o, y, x] = b[o] + sum over the group's channels and the window.
Values ConvReference(const std::vector<Values>& in, const ConvCase& k, int64_t oh, int64_t ow) {
  const int64_t cg = k.c / k.groups, fg = k.filters / k.groups;
  Values out(k.n * k.filters * oh * ow);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.filters; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          double acc = k.no_bias ? 0 : in[2][o];
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t ic = (o / fg) * cg + c;
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t iy = y * k.stride - k.pad + i * k.dilate;
                const int64_t ix = x * k.stride - k.pad + j * k.dilate;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                acc += in[0][((n * k.c + ic) * k.h + iy) * k.w + ix] *
                       in[1][((o * cg + c) * k.kh + i) * k.kw + j];
              }
          }
          out[((n * k.filters + o) * oh + y) * ow + x] = acc;
        }
  return out;
}

// Scatters every input element through the (in, out/group, kh, kw) weight.
Values DeconvReference(const std::vector<Values>& in, const ConvCase& k, int64_t oh, int64_t ow) {
  const int64_t cg = k.c / k.groups, fg = k.filters / k.groups;
  Values out(k.n * k.filters * oh * ow, 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t ic = 0; ic < k.c; ++ic)
      for (int64_t y = 0; y < k.h; ++y)
        for (int64_t x = 0; x < k.w; ++x)
          for (int64_t f = 0; f < fg; ++f) {
            const int64_t o = (ic / cg) * fg + f;
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t oy = y * k.stride - k.pad + i * k.dilate;
                const int64_t ox = x * k.stride - k.pad + j * k.dilate;
                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                out[((n * k.filters + o) * oh + oy) * ow + ox] +=
                    in[0][((n * k.c + ic) * k.h + y) * k.w + x] *
                    in[1][((ic * fg + f) * k.kh + i) * k.kw + j];
              }
          }
  if (!k.no_bias) {
    for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
      out[i] += in[2][(i / (oh * ow)) % k.filters];
    }
  }
  return out;
}

void CheckConv(const ConvCase& k) {
  SCOPED_TRACE(absl::StrCat("conv c=", k.c, " f=", k.filters, " k=", k.kh, "x", k.kw,
                            " s=", k.stride, " p=", k.pad, " d=", k.dilate, " g=", k.groups));
  auto checker = OpChecker::Create("Convolution", Kwargs(k, false), {Shape{k.n, k.c, k.h, k.w}});
  ASSERT_THAT(checker, IsOk());
  const int64_t oh = (k.h + 2 * k.pad - k.dilate * (k.kh - 1) - 1) / k.stride + 1;
  const int64_t ow = (k.w + 2 * k.pad - k.dilate * (k.kw - 1) - 1) / k.stride + 1;
  ASSERT_EQ((*checker)->out_shapes()[0], (Shape{k.n, k.filters, oh, ow}));
  ASSERT_EQ((*checker)->in_shapes()[1], (Shape{k.filters, k.c / k.groups, k.kh, k.kw}));
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        return std::vector<Values>{ConvReference(in, k, oh, ow)};
      },
      kForwardTol);
  (*checker)->CheckBackward(kGradTol, 1e-2);
}

void CheckDeconv(const ConvCase& k) {
  SCOPED_TRACE(absl::StrCat("deconv c=", k.c, " f=", k.filters, " k=", k.kh, "x", k.kw,
                            " s=", k.stride, " p=", k.pad, " d=", k.dilate, " g=", k.groups,
                            " adj=", k.adj));
  auto checker = OpChecker::Create("Deconvolution", Kwargs(k, true), {Shape{k.n, k.c, k.h, k.w}});
  ASSERT_THAT(checker, IsOk());
  const int64_t oh = (k.h - 1) * k.stride - 2 * k.pad + k.dilate * (k.kh - 1) + 1 + k.adj;
  const int64_t ow = (k.w - 1) * k.stride - 2 * k.pad + k.dilate * (k.kw - 1) + 1 + k.adj;
  ASSERT_EQ((*checker)->out_shapes()[0], (Shape{k.n, k.filters, oh, ow}));
  ASSERT_EQ((*checker)->in_shapes()[1], (Shape{k.c, k.filters / k.groups, k.kh, k.kw}));
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        return std::vector<Values>{DeconvReference(in, k, oh, ow)};
      },
      kForwardTol);
  (*checker)->CheckBackward(kGradTol, 1e-2);
}

TEST(ConvolutionTest, Basic) {
  CheckConv({.n = 2, .c = 3, .h = 6, .w = 5, .filters = 4, .kh = 3, .kw = 3});
}

TEST(ConvolutionTest, StridePadNoBias) {
  CheckConv({.n = 2,
             .c = 2,
             .h = 7,
             .w = 6,
             .filters = 3,
             .kh = 3,
             .kw = 2,
             .stride = 2,
             .pad = 1,
             .no_bias = true});
}

TEST(ConvolutionTest, Dilation) {
  CheckConv(
      {.n = 1, .c = 2, .h = 7, .w = 7, .filters = 2, .kh = 3, .kw = 3, .pad = 2, .dilate = 2});
}

TEST(ConvolutionTest, Groups) {
  CheckConv(
      {.n = 2, .c = 4, .h = 5, .w = 5, .filters = 6, .kh = 3, .kw = 3, .pad = 1, .groups = 2});
}

TEST(ConvolutionTest, Depthwise) {
  CheckConv({.n = 1,
             .c = 3,
             .h = 5,
             .w = 4,
             .filters = 3,
             .kh = 3,
             .kw = 3,
             .stride = 2,
             .pad = 1,
             .groups = 3});
}

TEST(DeconvolutionTest, Basic) {
  CheckDeconv({.n = 2, .c = 3, .h = 4, .w = 3, .filters = 2, .kh = 3, .kw = 3});
}

TEST(DeconvolutionTest, StridePadAdjBias) {
  CheckDeconv({.n = 1,
               .c = 2,
               .h = 3,
               .w = 4,
               .filters = 3,
               .kh = 3,
               .kw = 3,
               .stride = 2,
               .pad = 1,
               .adj = 1});
}

TEST(DeconvolutionTest, GroupsDilation) {
  CheckDeconv({.n = 2,
               .c = 4,
               .h = 3,
               .w = 3,
               .filters = 2,
               .kh = 2,
               .kw = 2,
               .stride = 2,
               .dilate = 2,
               .groups = 2,
               .no_bias = true});
}

TEST(ConvolutionTest, ChannelsNotDivisibleByGroups) {
  auto prop = OpRegistry::Global().Create(
      "Convolution", {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"num_group", "2"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{1, 3, 8, 8}, Shape{}, Shape{}}, out(1), aux;
  EXPECT_THAT(
      (*prop)->InferShape(&in, &out, &aux),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("Convolution"), HasSubstr("(1,3,8,8)"), HasSubstr("num_group 2"))));
}

TEST(ConvolutionTest, WrongWeightShapeNamesBothShapes) {
  auto prop =
      OpRegistry::Global().Create("Convolution", {{"kernel", "(5,5)"}, {"num_filter", "20"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{64, 1, 28, 28}, Shape{20, 3, 5, 5}, Shape{}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Convolution"), HasSubstr("'weight'"),
                             HasSubstr("(20,1,5,5)"), HasSubstr("(20,3,5,5)"))));
  std::vector<Shape> in2{Shape{64, 1, 28, 28}, Shape{}, Shape{}}, out2(1);
  auto known = (*prop)->InferShape(&in2, &out2, &aux);
  ASSERT_THAT(known, IsOk());
  EXPECT_EQ(out2[0], (Shape{64, 20, 24, 24}));
  EXPECT_EQ(in2[2], (Shape{20}));
}

TEST(ConvolutionTest, KernelLargerThanInput) {
  auto prop =
      OpRegistry::Global().Create("Convolution", {{"kernel", "(5,5)"}, {"num_filter", "2"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{1, 1, 3, 3}, Shape{}, Shape{}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(1,1,3,3)")));
  std::vector<Shape> in3{Shape{1, 3, 3}, Shape{}, Shape{}};
  EXPECT_THAT((*prop)->InferShape(&in3, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4-D")));
}

TEST(ConvolutionTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("Convolution", {{"num_filter", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel")));
  EXPECT_THAT(
      OpRegistry::Global().Create("Convolution", {{"kernel", "(3,3,3)"}, {"num_filter", "2"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel")));
  EXPECT_THAT(OpRegistry::Global().Create(
                  "Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"stride", "(0,1)"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stride")));
  EXPECT_THAT(
      OpRegistry::Global().Create(
          "Deconvolution",
          {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"stride", "(2,2)"}, {"adj", "(2,2)"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("adj")));
}

TEST(DeconvolutionTest, InfersMxnetWeightLayout) {
  auto prop = OpRegistry::Global().Create("Deconvolution", {{"kernel", "(4,4)"},
                                                            {"num_filter", "6"},
                                                            {"num_group", "3"},
                                                            {"stride", "(2,2)"},
                                                            {"pad", "(1,1)"}});
  ASSERT_THAT(prop, IsOk());
  EXPECT_EQ((*prop)->ListArguments(), (std::vector<std::string>{"data", "weight"}));
  std::vector<Shape> in{Shape{2, 9, 5, 5}, Shape{}}, out(1), aux;
  auto known = (*prop)->InferShape(&in, &out, &aux);
  ASSERT_THAT(known, IsOk());
  EXPECT_EQ(in[1], (Shape{9, 2, 4, 4}));
  EXPECT_EQ(out[0], (Shape{2, 6, 10, 10}));
}

}  // namespace
}  // namespace tessera::ops

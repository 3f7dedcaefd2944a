// Convolution and Deconvolution: forward against naive float64 loops, backward against
// finite differences (every OpReqType through OpChecker) over stride / pad / dilate /
// groups / no_bias / adj / target_shape, and shape-inference and parameter errors.
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/runtime.h"
#include "ops/operator.h"
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
  int64_t pad_w = -1;  // the width's pad where it differs from `pad` (deconvolution reference)
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
  const int64_t pad_w = k.pad_w < 0 ? k.pad : k.pad_w;
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
                const int64_t ox = x * k.stride - pad_w + j * k.dilate;
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

// Replaces (or adds) kwargs[key].
void SetKwarg(KwArgs* kwargs, const std::string& key, const std::string& value) {
  for (auto& [k, v] : *kwargs) {
    if (k == key) {
      v = value;
      return;
    }
  }
  kwargs->push_back({key, value});
}

// Deconvolution with target_shape (th, tw): the pad and adj MXNet's InferPad derives, per
// dimension, from the excess of the full output over the target (pad = ceil(excess / 2),
// adj = excess % 2). The output is exactly the target; the forward equals the reference
// with those pads and, where explicit parameters allow them (adj < stride), Deconvolution
// with them as explicit pad / adj; gradients by finite differences. `k.pad` is passed too,
// to show that target_shape overrides it.
void CheckDeconvTarget(const ConvCase& k, int64_t th, int64_t tw) {
  SCOPED_TRACE(absl::StrCat("deconv target (", th, ",", tw, ") in=", k.h, "x", k.w, " k=", k.kh,
                            "x", k.kw, " s=", k.stride, " d=", k.dilate, " g=", k.groups));
  const int64_t excess_h = (k.h - 1) * k.stride + k.dilate * (k.kh - 1) + 1 - th;
  const int64_t excess_w = (k.w - 1) * k.stride + k.dilate * (k.kw - 1) + 1 - tw;
  ASSERT_GE(excess_h, 0);
  ASSERT_GE(excess_w, 0);
  ConvCase derived = k;
  derived.pad = (excess_h + 1) / 2;
  derived.pad_w = (excess_w + 1) / 2;
  const int64_t adj_h = excess_h % 2, adj_w = excess_w % 2;
  KwArgs kw = Kwargs(k, true);
  SetKwarg(&kw, "target_shape", absl::StrCat("(", th, ",", tw, ")"));
  const Shape data{k.n, k.c, k.h, k.w};
  auto checker = OpChecker::Create("Deconvolution", kw, {data});
  ASSERT_THAT(checker, IsOk());
  ASSERT_EQ((*checker)->out_shapes()[0], (Shape{k.n, k.filters, th, tw}));
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        return std::vector<Values>{DeconvReference(in, derived, th, tw)};
      },
      kForwardTol);

  if (adj_h < k.stride && adj_w < k.stride) {
    KwArgs explicit_kw = Kwargs(k, true);
    SetKwarg(&explicit_kw, "pad", absl::StrCat("(", derived.pad, ",", derived.pad_w, ")"));
    SetKwarg(&explicit_kw, "adj", absl::StrCat("(", adj_h, ",", adj_w, ")"));
    auto explicit_op = OpChecker::Create("Deconvolution", explicit_kw, {data});
    ASSERT_THAT(explicit_op, IsOk());
    ASSERT_EQ((*explicit_op)->out_shapes()[0], (Shape{k.n, k.filters, th, tw}));
    for (int i = 0; i < static_cast<int>((*checker)->in_shapes().size()); ++i) {
      (*explicit_op)->SetInput(i, (*checker)->input(i));
    }
    auto explicit_out = (*explicit_op)->Forward();
    ASSERT_THAT(explicit_out, IsOk());
    auto target_out = (*checker)->Forward();
    ASSERT_THAT(target_out, IsOk());
    // The same primitive on the same descriptors: the same bits.
    EXPECT_EQ(*target_out, *explicit_out);
  }

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

// The layouts ConvOp picks (ConvLayoutPolicy::kAvoidChannelPadding): channels that oneDNN's
// blocks would pad run in NHWC (also the cases above with 1-4 input channels, or on a plain
// source where NHWC has no jit kernel); multiples of the block run in oneDNN's blocked
// layout, where a training Forward keeps its reordered input for Backward.
TEST(ConvolutionTest, ChannelsThatBlocksWouldPadRunInNhwc) {
  CheckConv({.n = 2, .c = 20, .h = 5, .w = 4, .filters = 6, .kh = 3, .kw = 3, .pad = 1});
}

TEST(ConvolutionTest, ChannelsInWholeBlocks) {
  CheckConv(
      {.n = 2, .c = 16, .h = 4, .w = 5, .filters = 16, .kh = 3, .kw = 2, .stride = 2, .pad = 1});
}

// With TESSERA_CONV_AUTOTUNE=1 each shape runs the fastest of its layouts as timed once
// (oneDNN's choice, NHWC, a plain source for a first layer; ops/nn/conv_autotune.h): the
// same values, within the reference's tolerance, whichever wins.
TEST(ConvolutionTest, LayoutsChosenByTimingComputeTheSame) {
  setenv("TESSERA_CONV_AUTOTUNE", "1", 1);
  CheckConv({.n = 4, .c = 1, .h = 12, .w = 12, .filters = 20, .kh = 5, .kw = 5});
  CheckConv({.n = 2, .c = 3, .h = 8, .w = 7, .filters = 5, .kh = 3, .kw = 3, .stride = 2, .pad = 1});
  CheckConv({.n = 2, .c = 20, .h = 5, .w = 4, .filters = 6, .kh = 3, .kw = 3, .pad = 1});
  CheckConv({.n = 2, .c = 16, .h = 4, .w = 5, .filters = 16, .kh = 3, .kw = 2, .stride = 2, .pad = 1});
  unsetenv("TESSERA_CONV_AUTOTUNE");
}

// Drives one Convolution operator directly, to check which input its weight gradient reads.
// Big enough (10.6 MFLOP forward) for two OpenMP threads where the call allows them
// (set_cpu_threads: RunContext::cpu_threads).
class ConvolutionCalls {
 public:
  static constexpr int64_t kN = 16, kC = 16, kH = 12, kF = 16;

  ConvolutionCalls() {
    auto rt = OwnedRuntime::Create(1);
    EXPECT_THAT(rt, IsOk());
    runtime_ = std::move(*rt);
    auto prop = OpRegistry::Global().Create(
        "Convolution", {{"kernel", "(3,3)"}, {"pad", "(1,1)"}, {"num_filter", "16"}});
    EXPECT_THAT(prop, IsOk());
    prop_ = std::move(*prop);
    std::vector<Shape> in{data_shape_, Shape{}, Shape{}}, out(1), aux;
    EXPECT_THAT(prop_->InferShape(&in, &out, &aux), IsOk());
    in_shapes_ = in;
    out_shape_ = out[0];
    auto op = prop_->CreateOperator(Context::CPU());
    EXPECT_THAT(op, IsOk());
    op_ = std::move(*op);
    std::mt19937_64 rng(7);
    for (const Shape& s : in_shapes_) params_.push_back(Floats(s.Size(), rng));
    out_grad_ = Floats(out_shape_.Size(), rng);
  }

  static std::vector<float> Floats(int64_t n, std::mt19937_64& rng) {
    std::vector<float> v;
    for (double x : testing::RandomValues(n, rng)) v.push_back(static_cast<float>(x));
    return v;
  }
  std::vector<float> NewData(uint64_t seed) {
    std::mt19937_64 rng(seed);
    return Floats(data_shape_.Size(), rng);
  }

  void Forward(std::vector<float>& data, bool is_train) {
    std::vector<float> out(out_shape_.Size());
    ASSERT_THAT(op_->Forward(Ctx(is_train, prop_->ForwardResource(in_shapes_)), Inputs(data),
                             {OpReqType::kWriteTo}, {Blob(out, out_shape_)}, {}),
                IsOk());
  }
  void set_cpu_threads(int threads) { cpu_threads_ = threads; }
  // The weight gradient for `data` (which must be the last training Forward's input).
  std::vector<float> WeightGradient(std::vector<float>& data) {
    std::vector<float> gdata(data.size()), gw(params_[1].size()), gb(params_[2].size());
    EXPECT_THAT(
        op_->Backward(
            Ctx(true, prop_->BackwardResource(in_shapes_)), {Blob(out_grad_, out_shape_)},
            Inputs(data), {}, std::vector<OpReqType>(3, OpReqType::kWriteTo),
            {Blob(gdata, in_shapes_[0]), Blob(gw, in_shapes_[1]), Blob(gb, in_shapes_[2])}, {}),
        IsOk());
    return gw;
  }
  // dW[o, c, i, j] = sum over n, y, x of out_grad[n, o, y, x] * data[n, c, y + i - 1, x + j - 1].
  std::vector<double> ReferenceWeightGradient(const std::vector<float>& data) const {
    std::vector<double> gw(kF * kC * 9, 0.0);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t o = 0; o < kF; ++o)
        for (int64_t c = 0; c < kC; ++c)
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j)
              for (int64_t y = 0; y < kH; ++y)
                for (int64_t x = 0; x < kH; ++x) {
                  const int64_t iy = y + i - 1, ix = x + j - 1;
                  if (iy < 0 || iy >= kH || ix < 0 || ix >= kH) continue;
                  gw[((o * kC + c) * 3 + i) * 3 + j] +=
                      out_grad_[((n * kF + o) * kH + y) * kH + x] *
                      data[((n * kC + c) * kH + iy) * kH + ix];
                }
    return gw;
  }

 private:
  TBlob Blob(std::vector<float>& v, const Shape& s) { return TBlob(v.data(), s, DType::kFloat32); }
  std::vector<TBlob> Inputs(std::vector<float>& data) {
    return {Blob(data, in_shapes_[0]), Blob(params_[1], in_shapes_[1]),
            Blob(params_[2], in_shapes_[2])};
  }
  OpContext Ctx(bool is_train, const std::vector<ResourceRequest>& requests) {
    OpContext ctx;
    ctx.is_train = is_train;
    ctx.run_ctx.ctx = Context::CPU();
    ctx.run_ctx.cpu_threads = cpu_threads_;
    for (const ResourceRequest& r : requests) {
      auto res = runtime_->get().resources->Request(Context::CPU(), r);
      EXPECT_THAT(res, IsOk());
      ctx.requested.push_back(*res);
    }
    return ctx;
  }

  const Shape data_shape_{kN, kC, kH, kH};
  std::unique_ptr<OwnedRuntime> runtime_;
  std::unique_ptr<OperatorProperty> prop_;
  std::unique_ptr<Operator> op_;
  std::vector<Shape> in_shapes_;
  Shape out_shape_;
  std::vector<std::vector<float>> params_;  // params_[0] unused: the data is per call
  std::vector<float> out_grad_;
  int cpu_threads_ = 1;
};

void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-4 * (1 + std::abs(expected[i]))) << "element " << i;
  }
}

TEST(ConvolutionTest, WeightGradientReadsTheInputOfItsForward) {
  ConvolutionCalls calls;
  std::vector<float> a = calls.NewData(1), b = calls.NewData(2);
  const std::vector<double> ref_a = calls.ReferenceWeightGradient(a);
  const std::vector<double> ref_b = calls.ReferenceWeightGradient(b);

  calls.Forward(a, true);
  ExpectClose(calls.WeightGradient(a), ref_a);
  calls.Forward(b, true);
  ExpectClose(calls.WeightGradient(b), ref_b);
  // A Backward on another buffer than the last training Forward's reads that buffer.
  calls.Forward(b, true);
  ExpectClose(calls.WeightGradient(a), ref_a);
  // An inference Forward in between leaves nothing to reuse.
  calls.Forward(a, true);
  calls.Forward(b, false);
  ExpectClose(calls.WeightGradient(a), ref_a);
  // Without any Forward the Backward still works from its inputs.
  ConvolutionCalls fresh;
  std::vector<float> c = fresh.NewData(3);
  ExpectClose(fresh.WeightGradient(c), fresh.ReferenceWeightGradient(c));
}

// oneDNN fixes a primitive's threads when it is created: the operator keeps one set of
// primitives per RunContext::cpu_threads, and a Backward on other threads than its Forward
// (a worker's Forward, a Backward run by a caller helping in WaitForAll) reads its input, not
// the other set's saved source.
TEST(ConvolutionTest, CallsOnOtherThreadCountsComputeTheSame) {
  ConvolutionCalls calls;
  std::vector<float> a = calls.NewData(1), b = calls.NewData(2);
  const std::vector<double> ref_a = calls.ReferenceWeightGradient(a);
  const std::vector<double> ref_b = calls.ReferenceWeightGradient(b);
  calls.set_cpu_threads(2);
  calls.Forward(a, true);
  ExpectClose(calls.WeightGradient(a), ref_a);
  calls.set_cpu_threads(1);
  calls.Forward(b, true);
  calls.set_cpu_threads(2);
  ExpectClose(calls.WeightGradient(b), ref_b);
  calls.Forward(a, true);
  calls.set_cpu_threads(1);
  ExpectClose(calls.WeightGradient(a), ref_a);
  calls.set_cpu_threads(4);
  calls.Forward(b, true);
  ExpectClose(calls.WeightGradient(b), ref_b);
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

// The usual 2x upsampling: excess 2, pad (1, 1), adj (0, 0); the given pad is ignored.
TEST(DeconvolutionTest, TargetShapeUpsample) {
  CheckDeconvTarget(
      {.n = 1, .c = 2, .h = 5, .w = 5, .filters = 3, .kh = 4, .kw = 4, .stride = 2, .pad = 3}, 10,
      10);
}

// Excess 3 and 0: pad (2, 0), adj (1, 0), no bias.
TEST(DeconvolutionTest, TargetShapeOddExcessPerDimension) {
  CheckDeconvTarget({.n = 2,
                     .c = 3,
                     .h = 4,
                     .w = 3,
                     .filters = 2,
                     .kh = 3,
                     .kw = 3,
                     .stride = 2,
                     .no_bias = true},
                    6, 7);
}

// Stride 1 with an odd excess (adj 1, which MXNet's adj < stride check would refuse; the
// crop is well defined), dilation and groups.
TEST(DeconvolutionTest, TargetShapeStride1DilationGroups) {
  CheckDeconvTarget(
      {.n = 1, .c = 4, .h = 3, .w = 4, .filters = 2, .kh = 3, .kw = 2, .dilate = 2, .groups = 2}, 6,
      5);
}

// Output shape == target for many geometries, through shape inference alone.
TEST(DeconvolutionTest, TargetShapeInference) {
  struct Case {
    int64_t in, kernel, stride, dilate, target;
  };
  for (const Case& c : std::vector<Case>{{1, 1, 1, 1, 1},
                                         {1, 3, 2, 1, 2},
                                         {7, 3, 2, 1, 13},
                                         {7, 3, 2, 1, 14},
                                         {7, 3, 2, 1, 15},
                                         {8, 4, 2, 1, 16},
                                         {5, 3, 3, 2, 9},
                                         {16, 2, 2, 1, 32},
                                         {4, 5, 1, 1, 1}}) {
    SCOPED_TRACE(absl::StrCat("in=", c.in, " k=", c.kernel, " s=", c.stride, " d=", c.dilate,
                              " target=", c.target));
    auto prop = OpRegistry::Global().Create(
        "Deconvolution", {{"kernel", absl::StrCat("(", c.kernel, ",", c.kernel, ")")},
                          {"stride", absl::StrCat("(", c.stride, ",", c.stride, ")")},
                          {"dilate", absl::StrCat("(", c.dilate, ",", c.dilate, ")")},
                          {"num_filter", "2"},
                          {"target_shape", absl::StrCat("(", c.target, ",", c.target + 1, ")")}});
    ASSERT_THAT(prop, IsOk());
    std::vector<Shape> in{Shape{1, 3, c.in, c.in + 1}, Shape{}}, out(1), aux;
    ASSERT_THAT((*prop)->InferShape(&in, &out, &aux), IsOk());
    EXPECT_EQ(out[0], (Shape{1, 2, c.target, c.target + 1}));
  }
}

TEST(DeconvolutionTest, TargetShapeErrors) {
  auto prop = OpRegistry::Global().Create(
      "Deconvolution",
      {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"num_filter", "2"}, {"target_shape", "(8,10)"}});
  ASSERT_THAT(prop, IsOk());
  // (4-1)*2 + 3 = 9 rows reach 8, but (4-1)*2 + 3 = 9 columns do not reach 10.
  std::vector<Shape> in{Shape{1, 3, 4, 4}, Shape{}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Deconvolution"), HasSubstr("target_shape (8,10)"),
                             HasSubstr("(1,3,4,4)"))));
  // A non-square input reaches it.
  std::vector<Shape> in2{Shape{1, 3, 4, 5}, Shape{}}, out2(1);
  ASSERT_THAT((*prop)->InferShape(&in2, &out2, &aux), IsOk());
  EXPECT_EQ(out2[0], (Shape{1, 2, 8, 10}));

  const KwArgs base = {{"kernel", "(3,3)"}, {"num_filter", "2"}};
  auto with = [&](const std::string& key, const std::string& value) {
    KwArgs kw = base;
    kw.push_back({key, value});
    return OpRegistry::Global().Create("Deconvolution", kw);
  };
  EXPECT_THAT(with("target_shape", "(4,4,4)"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_shape")));
  EXPECT_THAT(with("target_shape", "(0,4)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Deconvolution"), HasSubstr("target_shape"))));
  EXPECT_THAT(with("target_shape", "(-1,4)"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_shape")));
  // All zero is MXNet's "unset": pad and adj apply.
  auto unset = with("target_shape", "(0,0)");
  ASSERT_THAT(unset, IsOk());
  std::vector<Shape> in3{Shape{1, 3, 4, 4}, Shape{}}, out3(1);
  ASSERT_THAT((*unset)->InferShape(&in3, &out3, &aux), IsOk());
  EXPECT_EQ(out3[0], (Shape{1, 2, 6, 6}));
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

// MXNet's layout parameter, as Gluon writes it into symbol files: NCHW (or None) loads,
// another layout is refused by name rather than computed wrongly.
TEST(ConvolutionTest, LayoutIsNchwOnly) {
  for (const char* op : {"Convolution", "Deconvolution"}) {
    for (const char* layout : {"NCHW", "None"}) {
      EXPECT_THAT(OpRegistry::Global().Create(
                      op, {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"layout", layout}}),
                  IsOk())
          << op << " " << layout;
    }
    EXPECT_THAT(OpRegistry::Global().Create(
                    op, {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"layout", "NHWC"}}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(op), HasSubstr("layout 'NHWC'"))));
  }
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

// Pooling: max / avg (with and without padding in the divisor) / sum / lp, 'valid' and
// 'full' conventions and global pooling against a naive float64 reference with MXNet's
// window rules; backward against finite differences; inference and parameter errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
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

constexpr Tolerance kForwardTol{.rtol = 1e-5, .atol = 1e-6};
constexpr Tolerance kGradTol{.rtol = 2e-2, .atol = 1e-3};

struct PoolCase {
  std::string type = "max";
  int64_t n = 2, c = 3, h = 7, w = 6, k = 3, stride = 2, pad = 0;
  bool full = false;
  bool global = false;
  bool include_pad = true;
  int p = 0;              // lp's p_value
  bool positive = false;  // inputs > 0 (lp with odd p: no kink of the root at a zero sum)
  bool check_grad = true;
};

// MXNet's pooling: windows start at y*s - p; avg divides by the window clipped to the
// padded input (count_include_pad) or to the input.
Values Reference(const Values& x, const PoolCase& p, int64_t oh, int64_t ow) {
  const int64_t k = p.global ? p.h : p.k, kw = p.global ? p.w : p.k;
  const int64_t s = p.global ? 1 : p.stride, pad = p.global ? 0 : p.pad;
  Values out(p.n * p.c * oh * ow);
  for (int64_t nc = 0; nc < p.n * p.c; ++nc)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xx = 0; xx < ow; ++xx) {
        const int64_t hs = y * s - pad, ws = xx * s - pad;
        const int64_t he = std::min(hs + k, p.h + pad), we = std::min(ws + kw, p.w + pad);
        const int64_t padded_area = (he - hs) * (we - ws);
        double max = -std::numeric_limits<double>::infinity(), sum = 0, sum_p = 0;
        int64_t count = 0;
        for (int64_t i = std::max<int64_t>(hs, 0); i < std::min(he, p.h); ++i)
          for (int64_t j = std::max<int64_t>(ws, 0); j < std::min(we, p.w); ++j) {
            const double v = x[(nc * p.h + i) * p.w + j];
            max = std::max(max, v);
            sum += v;
            sum_p += std::pow(v, p.p);
            ++count;
          }
        double r = max;
        if (p.type == "sum") r = sum;
        // MXNet's lp: the (real) p-th root of the sum of powers.
        if (p.type == "lp") r = std::copysign(std::pow(std::abs(sum_p), 1.0 / p.p), sum_p);
        if (p.type == "avg") r = sum / static_cast<double>(p.include_pad ? padded_area : count);
        out[(nc * oh + y) * ow + xx] = r;
      }
  return out;
}

void Check(const PoolCase& p) {
  SCOPED_TRACE(absl::StrCat(p.type, " k=", p.k, " s=", p.stride, " p=", p.pad, " full=", p.full,
                            " global=", p.global, " include_pad=", p.include_pad,
                            " p_value=", p.p));
  KwArgs kw = {{"pool_type", p.type},
               {"pooling_convention", p.full ? "full" : "valid"},
               {"count_include_pad", p.include_pad ? "true" : "false"}};
  if (p.type == "lp") kw.push_back({"p_value", absl::StrCat(p.p)});
  if (p.global) {
    kw.push_back({"global_pool", "true"});
  } else {
    kw.push_back({"kernel", absl::StrCat("(", p.k, ",", p.k, ")")});
    kw.push_back({"stride", absl::StrCat("(", p.stride, ",", p.stride, ")")});
    kw.push_back({"pad", absl::StrCat("(", p.pad, ",", p.pad, ")")});
  }
  auto checker = OpChecker::Create("Pooling", kw, {Shape{p.n, p.c, p.h, p.w}});
  ASSERT_THAT(checker, IsOk());
  auto out_len = [&](int64_t in) {
    const int64_t span = in + 2 * p.pad - p.k;
    return 1 + (p.full ? (span + p.stride - 1) / p.stride : span / p.stride);
  };
  const int64_t oh = p.global ? 1 : out_len(p.h), ow = p.global ? 1 : out_len(p.w);
  ASSERT_EQ((*checker)->out_shapes()[0], (Shape{p.n, p.c, oh, ow}));
  // Distinct values at least 3e-3 apart, so max pooling's argmax never flips under the
  // finite-difference step.
  const int64_t size = p.n * p.c * p.h * p.w;
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), (*checker)->rng());
  Values x(size);
  for (int64_t i = 0; i < size; ++i) {
    x[i] = (i % 2 && !p.positive ? -1 : 1) * (0.1 + 3e-3 * order[i]);
  }
  (*checker)->SetInput(0, x);
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        return std::vector<Values>{Reference(in[0], p, oh, ow)};
      },
      kForwardTol);
  if (p.check_grad) (*checker)->CheckBackward(kGradTol, 1e-3);
}

TEST(PoolingTest, MaxValid) { Check({}); }
// Whole 2x2 blocks take the unrolled kernel: even planes, odd ones (the last row and column
// in no window: no gradient), and 'full' on odd planes (clipped last windows: the loops).
TEST(PoolingTest, MaxWhole2x2) { Check({.h = 8, .w = 6, .k = 2, .stride = 2}); }
TEST(PoolingTest, MaxWhole2x2OddPlanes) { Check({.h = 7, .w = 5, .k = 2, .stride = 2}); }
TEST(PoolingTest, Max2x2FullOddPlanes) {
  Check({.h = 7, .w = 5, .k = 2, .stride = 2, .full = true});
}
// After a ReLU most 2x2 windows hold ties. The gradient goes to the window's first input
// (row by row) equal to its output, as MXNet's CPU kernel, and the output is std::max's in
// that order, signed zeros included: the vectorized kernel must give the same bits. Width 22:
// 11 windows a row, so both the vector loops and their scalar tails run.
TEST(PoolingTest, MaxWhole2x2TiesGoToTheFirstMaximum) {
  const int64_t n = 2, c = 3, h = 6, w = 22, oh = h / 2, ow = w / 2;
  auto checker =
      OpChecker::Create("Pooling", {{"kernel", "(2,2)"}, {"stride", "(2,2)"}}, {Shape{n, c, h, w}});
  ASSERT_THAT(checker, IsOk());
  const std::vector<double> pool = {0.0, -0.0, 0.0, 1.0, 2.0, -1.0, 2.0};
  Values x(n * c * h * w);
  for (double& v : x) v = pool[(*checker)->rng()() % pool.size()];
  (*checker)->SetInput(0, x);
  Values dy(n * c * oh * ow);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0 + static_cast<double>(i);
  Values want_y(dy.size()), want_dx(x.size(), 0.0);
  for (int64_t plane = 0; plane < n * c; ++plane) {
    for (int64_t r = 0; r < oh; ++r) {
      for (int64_t k = 0; k < ow; ++k) {
        const int64_t top = (plane * h + 2 * r) * w + 2 * k;
        const int64_t window[4] = {top, top + 1, top + w, top + w + 1};
        float y = std::numeric_limits<float>::lowest();
        for (int64_t i : window) y = std::max(y, static_cast<float>(x[i]));
        const int64_t o = (plane * oh + r) * ow + k;
        want_y[o] = y;
        for (int64_t i : window) {
          if (static_cast<float>(x[i]) == y) {
            want_dx[i] = dy[o];
            break;
          }
        }
      }
    }
  }
  auto y = (*checker)->Forward();
  ASSERT_THAT(y, IsOk());
  ASSERT_EQ((*y)[0].size(), want_y.size());
  for (size_t i = 0; i < want_y.size(); ++i) {
    ASSERT_EQ((*y)[0][i], want_y[i]) << "output " << i;
    ASSERT_EQ(std::signbit((*y)[0][i]), std::signbit(want_y[i])) << "output " << i;
  }
  auto dx = (*checker)->Backward({dy});
  ASSERT_THAT(dx, IsOk());
  for (size_t i = 0; i < want_dx.size(); ++i) ASSERT_EQ((*dx)[0][i], want_dx[i]) << "input " << i;
}
TEST(PoolingTest, MaxPadFull) {
  Check({.h = 8, .w = 7, .k = 3, .stride = 2, .pad = 1, .full = true});
}
TEST(PoolingTest, AvgIncludePad) { Check({.type = "avg", .pad = 1}); }
TEST(PoolingTest, AvgExcludePad) { Check({.type = "avg", .pad = 1, .include_pad = false}); }
TEST(PoolingTest, AvgFullClipsDivisor) {
  Check({.type = "avg", .h = 8, .w = 7, .pad = 1, .full = true});
}
TEST(PoolingTest, Sum) { Check({.type = "sum", .k = 2, .stride = 1, .pad = 1}); }
TEST(PoolingTest, SumFull) {
  Check({.type = "sum", .h = 6, .w = 6, .k = 3, .stride = 2, .full = true});
}
TEST(PoolingTest, GlobalMax) { Check({.global = true}); }
TEST(PoolingTest, GlobalAvg) { Check({.type = "avg", .global = true}); }

// lp: p = 1 sums (signs kept), 2 and 3 are MXNet's sqrt / cbrt, larger p the generic root.
TEST(PoolingTest, LpP1) { Check({.type = "lp", .pad = 1, .p = 1}); }
TEST(PoolingTest, LpP2PadFull) {
  Check({.type = "lp", .h = 8, .w = 7, .pad = 1, .full = true, .p = 2});
}
TEST(PoolingTest, LpP3Overlapping) {
  Check({.type = "lp", .k = 2, .stride = 1, .p = 3, .positive = true});
}
// A negative sum of cubes has a negative cube root (forward only: the root has a kink at 0).
TEST(PoolingTest, LpP3NegativeSums) {
  Check({.type = "lp", .k = 2, .stride = 1, .p = 3, .check_grad = false});
}
TEST(PoolingTest, LpP4Global) { Check({.type = "lp", .global = true, .p = 4}); }
TEST(PoolingTest, LpP5Full) {
  Check({.type = "lp", .h = 6, .w = 6, .full = true, .p = 5, .positive = true});
}
// 'full' with stride > kernel leaves the last windows past the input: empty sums, y = 0.
TEST(PoolingTest, LpEmptyWindows) {
  Check({.type = "lp", .h = 5, .w = 5, .k = 1, .stride = 3, .full = true, .p = 2});
}

TEST(PoolingTest, KernelLargerThanInputNamesShapes) {
  auto prop = OpRegistry::Global().Create("Pooling", {{"kernel", "(5,5)"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{1, 2, 3, 3}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Pooling"), HasSubstr("(5,5)"), HasSubstr("(1,2,3,3)"))));
  std::vector<Shape> bad_out{Shape{1, 2, 9, 9}};
  std::vector<Shape> in2{Shape{1, 2, 7, 7}};
  EXPECT_THAT((*prop)->InferShape(&in2, &bad_out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("(1,2,3,3)"), HasSubstr("(1,2,9,9)"))));
}

TEST(PoolingTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"pool_type", "max"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel")));
  EXPECT_THAT(
      OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"pool_type", "lp"}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("Pooling"), HasSubstr("pool_type 'lp'"), HasSubstr("p_value"))));
  for (const char* unset : {"None", "0"}) {
    EXPECT_THAT(OpRegistry::Global().Create(
                    "Pooling", {{"kernel", "(2,2)"}, {"pool_type", "lp"}, {"p_value", unset}}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p_value")));
  }
  EXPECT_THAT(OpRegistry::Global().Create(
                  "Pooling", {{"kernel", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "-1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p_value")));
  EXPECT_THAT(OpRegistry::Global().Create(
                  "Pooling", {{"kernel", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "2"}}),
              IsOk());
  // MXNet ignores p_value, set or "None", for the other pool types.
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"p_value", "None"}}),
              IsOk());
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"layout", "NHWC"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Pooling"), HasSubstr("layout 'NHWC'"), HasSubstr("NCHW"))));
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"layout", "NCW"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout 'NCW'")));
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"layout", "nchw"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout")));
  for (const char* layout : {"None", "NCHW"}) {
    EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"layout", layout}}),
                IsOk());
  }
  EXPECT_THAT(
      OpRegistry::Global().Create("Pooling", {{"kernel", "(2,2)"}, {"pooling_convention", "same"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pooling_convention")));
  EXPECT_THAT(OpRegistry::Global().Create("Pooling", {{"global_pool", "true"}}), IsOk());
}

// Saved graphs write every parameter, defaults included (p_value 0, layout 'None'):
// they must load back to the same parameters.
TEST(PoolingTest, ParamsRoundTrip) {
  for (const KwArgs& kw : {KwArgs{{"kernel", "(2,2)"}},
                           KwArgs{{"kernel", "(3,3)"}, {"pool_type", "lp"}, {"p_value", "3"}}}) {
    auto prop = OpRegistry::Global().Create("Pooling", kw);
    ASSERT_THAT(prop, IsOk());
    const std::map<std::string, std::string> params = (*prop)->GetParams();
    auto again = OpRegistry::Global().Create("Pooling", KwArgs(params.begin(), params.end()));
    ASSERT_THAT(again, IsOk());
    EXPECT_EQ((*again)->GetParams(), params);
  }
}

}  // namespace
}  // namespace tessera::ops

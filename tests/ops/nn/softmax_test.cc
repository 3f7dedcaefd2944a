// softmax and log_softmax: every axis against a float64 reference, backward against finite
// differences, in-place forward, axis errors.
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

Values Reference(const Values& x_in, const Shape& shape, int axis, bool log,
                 double temperature = 1) {
  if (axis < 0) axis += shape.ndim();
  Values x = x_in;
  for (double& v : x) v /= temperature;
  const int64_t outer = shape.ProdRange(0, axis), n = shape[axis];
  const int64_t inner = shape.ProdRange(axis + 1, shape.ndim());
  Values out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double max = -1e300, sum = 0;
      for (int64_t k = 0; k < n; ++k) max = std::max(max, x[(o * n + k) * inner + i]);
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[(o * n + k) * inner + i] - max);
      for (int64_t k = 0; k < n; ++k) {
        const double v = x[(o * n + k) * inner + i] - max;
        out[(o * n + k) * inner + i] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return out;
}

void Check(const std::string& op, const Shape& shape, int axis) {
  SCOPED_TRACE(absl::StrCat(op, " ", shape.ToString(), " axis ", axis));
  auto checker = OpChecker::Create(op, {{"axis", absl::StrCat(axis)}}, {shape});
  ASSERT_THAT(checker, IsOk());
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
        return std::vector<Values>{Reference(in[0], shapes[0], axis, op == "log_softmax")};
      },
      Tolerance{.rtol = 1e-5, .atol = 1e-6});
  (*checker)->CheckBackward(Tolerance{.rtol = 2e-2, .atol = 1e-3}, 1e-2);
}

// A tensor this large runs on the threads its call may use (RunContext::cpu_threads), with
// primitives made for each thread count; every count computes the same.
TEST(SoftmaxTest, LargeTensorOnEveryThreadCount) {
  const Shape shape{2048, 100};  // 204,800 floats: two threads and more
  auto checker = OpChecker::Create("softmax", {}, {shape});
  ASSERT_THAT(checker, IsOk());
  OpChecker& c = **checker;
  const Values out_grad = testing::RandomValues(shape.Size(), c.rng());
  c.ForEachThreadCount([&] {
    c.CheckForward(
        [&](const std::vector<Values>& in, const std::vector<Shape>&) {
          return std::vector<Values>{Reference(in[0], shape, -1, false)};
        },
        Tolerance{.rtol = 1e-5, .atol = 1e-6});
    auto grads = c.Backward({out_grad});
    ASSERT_THAT(grads, IsOk());
    // d softmax: dx = y * (dy - sum(dy * y)) per row.
    const Values y = Reference(c.input(0), shape, -1, false);
    const int64_t n = shape[1];
    for (int64_t row = 0; row < shape[0]; ++row) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += out_grad[row * n + k] * y[row * n + k];
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = row * n + k;
        ASSERT_NEAR((*grads)[0][i], y[i] * (out_grad[i] - dot), 1e-5) << "element " << i;
      }
    }
  });
}

TEST(SoftmaxTest, LastAxisByDefault) {
  auto checker = OpChecker::Create("softmax", {}, {Shape{3, 5}});
  ASSERT_THAT(checker, IsOk());
  (*checker)->CheckForward([&](const std::vector<Values>& in, const std::vector<Shape>& s) {
    return std::vector<Values>{Reference(in[0], s[0], -1, false)};
  });
}

TEST(SoftmaxTest, EveryAxis) {
  for (int axis : {0, 1, 2, -1}) Check("softmax", Shape{2, 3, 4}, axis);
}

TEST(LogSoftmaxTest, EveryAxis) {
  for (int axis : {0, 1, -1}) Check("log_softmax", Shape{3, 2, 5}, axis);
}

TEST(SoftmaxTest, TemperatureDividesTheInput) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (double t : {0.5, 3.0}) {
      SCOPED_TRACE(absl::StrCat(op, " temperature ", t));
      auto checker =
          OpChecker::Create(op, {{"axis", "1"}, {"temperature", absl::StrCat(t)}}, {Shape{3, 4, 2}});
      ASSERT_THAT(checker, IsOk());
      (*checker)->CheckForward(
          [&](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
            return std::vector<Values>{
                Reference(in[0], shapes[0], 1, std::string(op) == "log_softmax", t)};
          },
          Tolerance{.rtol = 1e-5, .atol = 1e-6});
      (*checker)->CheckBackward(Tolerance{.rtol = 2e-2, .atol = 1e-3}, 1e-2);
    }
  }
}

TEST(SoftmaxTest, TemperatureMustBePositive) {
  for (const char* t : {"0", "-1"}) {
    EXPECT_THAT(OpRegistry::Global().Create("softmax", {{"temperature", t}}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("softmax"), HasSubstr("temperature"))));
  }
}

TEST(SoftmaxTest, AxisOutOfRangeNamesShape) {
  for (const char* op : {"softmax", "log_softmax"}) {
    auto prop = OpRegistry::Global().Create(op, {{"axis", "3"}});
    ASSERT_THAT(prop, IsOk());
    std::vector<Shape> in{Shape{2, 3}}, out(1), aux;
    EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(op), HasSubstr("(2,3)"), HasSubstr("3"))));
  }
  EXPECT_THAT(OpRegistry::Global().Create("softmax", {{"axis", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("axis")));
}

}  // namespace
}  // namespace tessera::ops

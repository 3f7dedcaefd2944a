// sum, mean, max, min, prod: forward against float64 loops over several axis/keepdims/exclude
// settings, backward against finite differences, tie handling, and parameter/shape errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/registry.h"
#include "tests/ops/op_check.h"
#include "tests/ops/tensor/test_util.h"

namespace tessera::ops::testing {
namespace {

using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Reduces `x` of `shape` over the dims flagged in `reduced`; output in kept-dims order.
Values RefReduce(const std::string& op, const Values& x, const Shape& shape,
                 const std::vector<bool>& reduced) {
  Shape keep;
  for (int d = 0; d < shape.ndim(); ++d) keep.push_back(reduced[d] ? 1 : shape[d]);
  const double init = op == "prod"  ? 1
                      : op == "max" ? -std::numeric_limits<double>::infinity()
                      : op == "min" ? std::numeric_limits<double>::infinity()
                                    : 0;
  Values y(keep.Size(), init);
  for (int64_t i = 0; i < shape.Size(); ++i) {
    double& acc = y[BroadcastOffset(shape, i, keep)];
    if (op == "sum" || op == "mean") acc += x[i];
    if (op == "prod") acc *= x[i];
    if (op == "max") acc = std::max(acc, x[i]);
    if (op == "min") acc = std::min(acc, x[i]);
  }
  if (op == "mean") {
    for (double& v : y) v /= static_cast<double>(shape.Size() / keep.Size());
  }
  return y;
}

struct Case {
  Shape in;
  std::string axis;  // "" = parameter not given
  bool keepdims;
  bool exclude;
  Shape out;
  std::vector<bool> reduced;
};

TEST(ReduceOpsTest, ForwardAndBackward) {
  const std::vector<Case> cases = {
      {{2, 3, 4}, "", false, false, {1}, {true, true, true}},
      {{2, 3, 4}, "", true, false, {1, 1, 1}, {true, true, true}},
      {{2, 3, 4}, "(1,)", false, false, {2, 4}, {false, true, false}},
      {{2, 3, 4}, "(-1)", true, false, {2, 3, 1}, {false, false, true}},
      {{2, 3, 4}, "(0,2)", false, false, {3}, {true, false, true}},
      {{2, 3, 4}, "(1)", false, true, {3}, {true, false, true}},
      {{2, 3, 4}, "(0,1,2)", false, true, {2, 3, 4}, {false, false, false}},
      {{5, 6}, "0", false, false, {6}, {true, false}},
      {{7}, "0", true, false, {1}, {true}},
  };
  uint64_t seed = 3;
  for (const char* op : {"sum", "mean", "max", "min", "prod"}) {
    for (const Case& t : cases) {
      KwArgs kw = {{"keepdims", t.keepdims ? "true" : "false"},
                   {"exclude", t.exclude ? "true" : "false"}};
      if (!t.axis.empty()) kw.push_back({"axis", t.axis});
      SCOPED_TRACE(absl::StrCat(op, " ", t.in.ToString(), " axis=", t.axis,
                                " keepdims=", t.keepdims, " exclude=", t.exclude));
      auto c = MakeChecker(op, kw, {t.in}, DType::kFloat64, seed++);
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->out_shapes()[0], t.out);
      const std::string name = op;
      c->CheckForward(
          [&](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
            return std::vector<Values>{RefReduce(name, in[0], shapes[0], t.reduced)};
          },
          {1e-12, 1e-12});
      c->CheckBackward({1e-6, 1e-8});
    }
  }
}

TEST(ReduceOpsTest, Float32) {
  for (const char* op : {"sum", "mean", "max"}) {
    auto c = MakeChecker(op, {{"axis", "(1,)"}}, {Shape{4, 6}}, DType::kFloat32, 9);
    ASSERT_NE(c, nullptr);
    c->CheckForward(
        [&](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
          return std::vector<Values>{RefReduce(op, in[0], shapes[0], {false, true})};
        },
        {1e-6, 1e-6});
    c->CheckBackward({1e-2, 1e-3});
  }
}

TEST(ReduceOpsTest, MaxGradientGoesToEveryTiedPosition) {
  auto c = MakeChecker("max", {{"axis", "(1,)"}}, {Shape{2, 3}}, DType::kFloat64);
  ASSERT_NE(c, nullptr);
  c->SetInput(0, {1, 5, 5, -1, -2, -3});
  auto grads = c->Backward({{2, 7}});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0], (Values{0, 2, 2, 7, 0, 0}));
}

TEST(ReduceOpsTest, BackwardDependencies) {
  auto sum = OpRegistry::Global().Create("sum", {});
  auto max = OpRegistry::Global().Create("max", {});
  ASSERT_TRUE(sum.ok() && max.ok());
  EXPECT_EQ((*sum)->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0}));
  EXPECT_EQ((*max)->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0, 1, 2}));
}

TEST(ReduceOpsTest, Errors) {
  auto prop = OpRegistry::Global().Create("sum", {{"axis", "(2,)"}});
  ASSERT_TRUE(prop.ok());
  std::vector<Shape> in = {Shape{2, 3}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("sum"), HasSubstr("axis=(2)"), HasSubstr("(2,3)"))));
  prop = OpRegistry::Global().Create("mean", {{"axis", "(0,-2)"}});
  ASSERT_TRUE(prop.ok());
  EXPECT_THAT(
      (*prop)->InferShape(&in, &out, &aux),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("mean"), HasSubstr("twice"))));
  in = {Shape()};
  auto known = (*prop)->InferShape(&in, &out, &aux);
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known);
  prop = OpRegistry::Global().Create("max", {{"keepdims", "true"}});
  ASSERT_TRUE(prop.ok());
  in = {Shape{2, 3}};
  out = {Shape{2, 3}};
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("max"), HasSubstr("(1,1)"), HasSubstr("(2,3)"))));
  EXPECT_THAT(
      OpRegistry::Global().Create("prod", {{"axis", "x"}}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("prod"), HasSubstr("axis"))));
  EXPECT_THAT(OpRegistry::Global().Create("min", {{"keepdim", "1"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keepdim")));
}

}  // namespace
}  // namespace tessera::ops::testing

// broadcast_add/sub/mul/div/power/maximum/minimum: forward against float64 loops over
// several broadcast patterns (every OpReqType and in-place option via OpChecker), backward
// against finite differences, inference errors and backward dependencies.
#include <cmath>
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

double Apply(const std::string& op, double a, double b) {
  if (op == "broadcast_add") return a + b;
  if (op == "broadcast_sub") return a - b;
  if (op == "broadcast_mul") return a * b;
  if (op == "broadcast_div") return a / b;
  if (op == "broadcast_power") return std::pow(a, b);
  if (op == "broadcast_maximum") return std::max(a, b);
  return std::min(a, b);
}

ReferenceFn BroadcastRef(const std::string& op) {
  return [op](const std::vector<Values>& in, const std::vector<Shape>& shapes) {
    const Shape out = *BroadcastShapes(shapes[0], shapes[1]);
    Values y(out.Size());
    for (int64_t i = 0; i < out.Size(); ++i) {
      y[i] = Apply(op, in[0][BroadcastOffset(out, i, shapes[0])],
                   in[1][BroadcastOffset(out, i, shapes[1])]);
    }
    return std::vector<Values>{y};
  };
}

const char* const kOps[] = {"broadcast_add",    "broadcast_sub",   "broadcast_mul",
                            "broadcast_div",    "broadcast_power", "broadcast_maximum",
                            "broadcast_minimum"};

const std::vector<std::pair<Shape, Shape>> kPatterns = {
    {{2, 3}, {2, 3}}, {{2, 3}, {3}},          {{4, 1}, {1, 5}}, {{3, 1, 4}, {2, 1}},
    {{1}, {3, 2}},    {{2, 3, 4}, {2, 1, 4}}, {{5}, {1}},
};

TEST(BroadcastBinaryOpsTest, ForwardAndBackwardFloat64) {
  uint64_t seed = 1;
  for (const char* op : kOps) {
    for (const auto& [ls, rs] : kPatterns) {
      SCOPED_TRACE(absl::StrCat(op, " ", ls.ToString(), " ", rs.ToString()));
      auto c = MakeChecker(op, {}, {ls, rs}, DType::kFloat64, seed++);
      ASSERT_NE(c, nullptr);
      if (std::string(op) == "broadcast_power") {
        Values base = c->input(0);
        for (double& x : base) x = std::fabs(x) + 0.5;  // ln(lhs) in the rhs gradient
        c->SetInput(0, base);
      }
      EXPECT_EQ(c->out_shapes()[0], *BroadcastShapes(ls, rs));
      c->CheckForward(BroadcastRef(op), {1e-12, 1e-12});
      c->CheckBackward({1e-6, 1e-8});
    }
  }
}

TEST(BroadcastBinaryOpsTest, Float32) {
  for (const char* op : {"broadcast_add", "broadcast_mul", "broadcast_maximum"}) {
    auto c = MakeChecker(op, {}, {Shape{3, 4}, Shape{4}}, DType::kFloat32, 5);
    ASSERT_NE(c, nullptr);
    c->CheckForward(BroadcastRef(op), {1e-6, 1e-6});
    c->CheckBackward({1e-2, 1e-3});
  }
}

TEST(BroadcastBinaryOpsTest, MaximumTieGoesToLhs) {
  auto c = MakeChecker("broadcast_maximum", {}, {Shape{3}, Shape{3}}, DType::kFloat64);
  ASSERT_NE(c, nullptr);
  c->SetInput(0, {1, 2, 3});
  c->SetInput(1, {1, 5, 0});
  auto grads = c->Backward({{10, 20, 30}});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0], (Values{10, 0, 30}));
  EXPECT_EQ((*grads)[1], (Values{0, 20, 0}));
}

TEST(BroadcastBinaryOpsTest, InferShape) {
  auto prop = OpRegistry::Global().Create("broadcast_add", {});
  ASSERT_TRUE(prop.ok()) << prop.status();
  EXPECT_EQ((*prop)->ListArguments(), (std::vector<std::string>{"lhs", "rhs"}));
  std::vector<Shape> in = {Shape{2, 3}, Shape()}, out(1), aux;
  auto known = (*prop)->InferShape(&in, &out, &aux);
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known);

  in = {Shape{2, 3}, Shape{4}};
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("broadcast_add"), HasSubstr("'lhs' (2,3)"),
                             HasSubstr("'rhs' (4,)"))));
  in = {Shape{2, 3}, Shape{3}};
  out = {Shape{3, 3}};
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("broadcast_add"), HasSubstr("(2,3)"), HasSubstr("(3,3)"))));
  out = {Shape()};
  known = (*prop)->InferShape(&in, &out, &aux);
  ASSERT_TRUE(known.ok() && *known);
  EXPECT_EQ(out[0], (Shape{2, 3}));
  EXPECT_THAT(OpRegistry::Global().Create("broadcast_mul", {{"axis", "1"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("axis")));
}

TEST(BroadcastBinaryOpsTest, BackwardDependencies) {
  auto add = OpRegistry::Global().Create("broadcast_add", {});
  auto mul = OpRegistry::Global().Create("broadcast_mul", {});
  ASSERT_TRUE(add.ok() && mul.ok());
  // ids: out_grad 0, in_data 1 2, out_data 3
  EXPECT_EQ((*add)->DeclareBackwardDependency({0}, {1, 2}, {3}), (std::vector<int>{0}));
  EXPECT_EQ((*mul)->DeclareBackwardDependency({0}, {1, 2}, {3}), (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace tessera::ops::testing

// Activation: relu / sigmoid / tanh / softrelu / softsign against float64 formulas, backward against
// finite differences, in place both ways (the harness checks the options the property
// offers), and parameter errors.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

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

void Check(const std::string& act, const std::function<double(double)>& f, const Shape& shape) {
  SCOPED_TRACE(act);
  auto checker = OpChecker::Create("Activation", {{"act_type", act}}, {shape});
  ASSERT_THAT(checker, IsOk());
  EXPECT_EQ((*checker)->out_shapes()[0], shape);
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        Values out(in[0].size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = f(in[0][i]);
        return std::vector<Values>{out};
      },
      Tolerance{.rtol = 1e-5, .atol = 1e-6});
  (*checker)->CheckBackward(Tolerance{.rtol = 2e-2, .atol = 1e-3}, 1e-2);
}

TEST(ActivationTest, Relu) {
  Check(
      "relu", [](double x) { return x > 0 ? x : 0; }, Shape{3, 4, 5});
}
TEST(ActivationTest, Sigmoid) {
  Check(
      "sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, Shape{2, 7});
}
TEST(ActivationTest, Tanh) {
  Check(
      "tanh", [](double x) { return std::tanh(x); }, Shape{2, 3, 2, 2});
}
TEST(ActivationTest, SoftRelu) {
  Check(
      "softrelu", [](double x) { return std::log1p(std::exp(x)); }, Shape{5, 3});
}

TEST(ActivationTest, SoftSign) {
  Check(
      "softsign", [](double x) { return x / (1 + std::abs(x)); }, Shape{4, 6});
}

// A tensor this large runs on the threads its call may use (RunContext::cpu_threads), with
// primitives made for each thread count; every count computes the same.
TEST(ActivationTest, LargeTensorOnEveryThreadCount) {
  const Shape shape{8, 16, 40, 40};  // 204,800 floats: two threads and more
  auto checker = OpChecker::Create("Activation", {{"act_type", "tanh"}}, {shape});
  ASSERT_THAT(checker, IsOk());
  OpChecker& c = **checker;
  const Values out_grad = testing::RandomValues(shape.Size(), c.rng());
  c.ForEachThreadCount([&] {
    c.CheckForward(
        [](const std::vector<Values>& in, const std::vector<Shape>&) {
          Values out(in[0].size());
          for (size_t i = 0; i < out.size(); ++i) out[i] = std::tanh(in[0][i]);
          return std::vector<Values>{out};
        },
        Tolerance{.rtol = 1e-5, .atol = 1e-6});
    auto grads = c.Backward({out_grad});
    ASSERT_THAT(grads, IsOk());
    for (size_t i = 0; i < out_grad.size(); ++i) {
      const double y = std::tanh(c.input(0)[i]);
      ASSERT_NEAR((*grads)[0][i], out_grad[i] * (1 - y * y), 1e-5) << "element " << i;
    }
  });
}

TEST(ActivationTest, InPlaceOptionsAsMxnet) {
  auto prop = OpRegistry::Global().Create("Activation", {{"act_type", "relu"}});
  ASSERT_THAT(prop, IsOk());
  using Pairs = std::vector<std::pair<int, int>>;
  EXPECT_EQ((*prop)->ForwardInplaceOption({0}, {1}), (Pairs{{0, 1}}));
  EXPECT_EQ((*prop)->BackwardInplaceOption({0}, {1}, {2}, {3}), (Pairs{{0, 3}}));
  // Backward reads out_grad and the output only.
  EXPECT_THAT((*prop)->DeclareBackwardDependency({0}, {1}, {2}),
              ::testing::UnorderedElementsAre(0, 2));
}

TEST(ActivationTest, ShapeMismatch) {
  auto prop = OpRegistry::Global().Create("Activation", {{"act_type", "tanh"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{2, 3}}, out{Shape{3, 2}}, aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Activation"), HasSubstr("(2,3)"), HasSubstr("(3,2)"))));
}

TEST(ActivationTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("Activation", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("act_type")));
  EXPECT_THAT(OpRegistry::Global().Create("Activation", {{"act_type", "gelu"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'gelu'"), HasSubstr("'relu'"))));
}

}  // namespace
}  // namespace tessera::ops

// SimpleOp elementwise operators: forward against float64 references, backward against
// finite differences, every OpReqType and in-place option (OpChecker), and the SimpleOp
// plumbing (scalar parameter, shape checks, backward dependencies, devices).
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "ops/registry.h"
#include "tests/ops/op_check.h"

namespace tessera::ops {
namespace {

using testing::OpChecker;
using testing::Values;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

// A reference that maps one input elementwise.
testing::ReferenceFn Unary(std::function<double(double)> f) {
  return [f](const std::vector<Values>& in, const std::vector<Shape>&) {
    Values out(in[0].size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(in[0][i]);
    return std::vector<Values>{out};
  };
}

testing::ReferenceFn Binary(std::function<double(double, double)> f) {
  return [f](const std::vector<Values>& in, const std::vector<Shape>&) {
    Values out(in[0].size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(in[0][i], in[1][i]);
    return std::vector<Values>{out};
  };
}

std::unique_ptr<OpChecker> MakeChecker(const std::string& op, const KwArgs& kwargs,
                                       std::vector<Shape> shapes,
                                       DType dtype = DType::kFloat64) {
  auto checker = OpChecker::Create(op, kwargs, shapes, dtype);
  EXPECT_TRUE(checker.ok()) << checker.status();
  return checker.ok() ? std::move(checker).value() : nullptr;
}

struct UnaryCase {
  std::string op;
  std::function<double(double)> f;
  bool positive_only;  // domain restricted to x > 0
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.op; }

class UnaryOpTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryOpTest, ForwardAndBackward) {
  const UnaryCase& c = GetParam();
  for (const Shape& shape : {Shape{7}, Shape{3, 4, 5}}) {
    auto checker = MakeChecker(c.op, {}, {shape});
    ASSERT_NE(checker, nullptr);
    if (c.positive_only) {
      Values x = checker->input(0);
      for (double& v : x) v = std::abs(v) + 0.5;
      checker->SetInput(0, x);
    }
    checker->CheckForward(Unary(c.f), {1e-12, 1e-12});
    checker->CheckBackward({1e-6, 1e-8});
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, UnaryOpTest,
    ::testing::Values(UnaryCase{"negative", [](double x) { return -x; }, false},
                      UnaryCase{"abs", [](double x) { return std::abs(x); }, false},
                      UnaryCase{"square", [](double x) { return x * x; }, false},
                      UnaryCase{"sqrt", [](double x) { return std::sqrt(x); }, true},
                      UnaryCase{"rsqrt", [](double x) { return 1 / std::sqrt(x); }, true},
                      UnaryCase{"exp", [](double x) { return std::exp(x); }, false},
                      UnaryCase{"log", [](double x) { return std::log(x); }, true},
                      UnaryCase{"sin", [](double x) { return std::sin(x); }, false},
                      UnaryCase{"cos", [](double x) { return std::cos(x); }, false},
                      UnaryCase{"reciprocal", [](double x) { return 1 / x; }, false}),
    [](const ::testing::TestParamInfo<UnaryCase>& info) { return info.param.op; });

struct ScalarCase {
  std::string op;
  double scalar;
  std::function<double(double, double)> f;  // (x, scalar)
};

void PrintTo(const ScalarCase& c, std::ostream* os) { *os << c.op; }

class ScalarOpTest : public ::testing::TestWithParam<ScalarCase> {};

TEST_P(ScalarOpTest, ForwardAndBackward) {
  const ScalarCase& c = GetParam();
  auto checker = MakeChecker(c.op, {{"scalar", std::to_string(c.scalar)}}, {Shape{4, 6}});
  ASSERT_NE(checker, nullptr);
  if (c.op == "_power_scalar") {  // fractional powers need x > 0
    Values x = checker->input(0);
    for (double& v : x) v = std::abs(v) + 0.5;
    checker->SetInput(0, x);
  }
  const double s = c.scalar;
  checker->CheckForward(Unary([&](double x) { return c.f(x, s); }), {1e-12, 1e-12});
  checker->CheckBackward({1e-6, 1e-8});
}

INSTANTIATE_TEST_SUITE_P(
    All, ScalarOpTest,
    ::testing::Values(ScalarCase{"_plus_scalar", 1.5, [](double x, double s) { return x + s; }},
                      ScalarCase{"_minus_scalar", 1.5, [](double x, double s) { return x - s; }},
                      ScalarCase{"_rminus_scalar", 1.5, [](double x, double s) { return s - x; }},
                      ScalarCase{"_mul_scalar", -2.5, [](double x, double s) { return x * s; }},
                      ScalarCase{"_div_scalar", 4.0, [](double x, double s) { return x / s; }},
                      ScalarCase{"_rdiv_scalar", 3.0, [](double x, double s) { return s / x; }},
                      ScalarCase{"_power_scalar", 2.5,
                                 [](double x, double s) { return std::pow(x, s); }},
                      ScalarCase{"_rpower_scalar", 2.0,
                                 [](double x, double s) { return std::pow(s, x); }}),
    [](const ::testing::TestParamInfo<ScalarCase>& info) { return info.param.op; });

struct BinaryCase {
  std::string op;
  std::function<double(double, double)> f;
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.op; }

class BinaryOpTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryOpTest, ForwardAndBackward) {
  const BinaryCase& c = GetParam();
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    auto checker = MakeChecker(c.op, {}, {Shape{5, 3}, Shape{5, 3}}, dtype);
    ASSERT_NE(checker, nullptr);
    if (dtype == DType::kFloat64) {
      checker->CheckForward(Binary(c.f), {1e-12, 1e-12});
      checker->CheckBackward({1e-6, 1e-8});
    } else {
      checker->CheckForward(Binary(c.f), {1e-6, 1e-6});
      checker->CheckBackward({2e-2, 1e-3}, 1e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, BinaryOpTest,
    ::testing::Values(BinaryCase{"elemwise_add", [](double a, double b) { return a + b; }},
                      BinaryCase{"elemwise_sub", [](double a, double b) { return a - b; }},
                      BinaryCase{"elemwise_mul", [](double a, double b) { return a * b; }},
                      BinaryCase{"elemwise_div", [](double a, double b) { return a / b; }}),
    [](const ::testing::TestParamInfo<BinaryCase>& info) { return info.param.op; });

// The seeds' example: smooth L1 with sigma, on both sides of the turning point.
TEST(SmoothL1Test, MatchesTheSeedsDefinition) {
  for (double sigma : {1.0, 2.0, 0.7}) {
    auto checker = MakeChecker("smooth_l1", {{"scalar", std::to_string(sigma)}}, {Shape{50}});
    ASSERT_NE(checker, nullptr);
    Values x(50);
    for (int i = 0; i < 50; ++i) {
      x[i] = -3 + 6.0 * i / 49 + 0.013;  // spans both branches, avoids the kinks exactly
    }
    checker->SetInput(0, x);
    const double s2 = sigma * sigma;
    checker->CheckForward(Unary([s2](double v) {
                            if (v > 1 / s2) return v - 0.5 / s2;
                            if (v < -1 / s2) return -v - 0.5 / s2;
                            return 0.5 * v * v * s2;
                          }),
                          {1e-12, 1e-12});
    checker->CheckBackward({1e-5, 1e-7});
  }
}

TEST(SmoothL1Test, DeclaresTheSeedsDependenciesAndInplace) {
  auto prop = OpRegistry::Global().Create("smooth_l1", {{"scalar", "1"}});
  ASSERT_TRUE(prop.ok());
  // T2 gradient: out_grad (id 0) and the input (id 1), not the output (id 2).
  EXPECT_EQ((*prop)->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0, 1}));
  EXPECT_TRUE((*prop)->ForwardInplaceOption({1}, {2}).empty());
  EXPECT_EQ((*prop)->BackwardInplaceOption({0}, {1}, {2}, {3}),
            (std::vector<std::pair<int, int>>{{0, 3}}));
}

TEST(SimpleOpTest, BackwardDependenciesFollowTheGradientKind) {
  auto negative = OpRegistry::Global().Create("negative", {});  // T0
  auto exp = OpRegistry::Global().Create("exp", {});            // T1
  auto mul = OpRegistry::Global().Create("elemwise_mul", {});   // T2, binary
  ASSERT_TRUE(negative.ok() && exp.ok() && mul.ok());
  EXPECT_EQ((*negative)->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0}));
  EXPECT_EQ((*exp)->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0, 2}));
  EXPECT_EQ((*mul)->DeclareBackwardDependency({0}, {1, 2}, {3}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ((*mul)->ListArguments(), (std::vector<std::string>{"lhs", "rhs"}));
}

TEST(SimpleOpTest, ScalarParameterIsRequiredAndParsed) {
  EXPECT_THAT(OpRegistry::Global().Create("_mul_scalar", {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'scalar' is missing")));
  EXPECT_THAT(OpRegistry::Global().Create("_mul_scalar", {{"scalar", "two"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'two'")));
  EXPECT_THAT(OpRegistry::Global().Create("exp", {{"scalar", "2"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown parameter 'scalar'")));
  auto prop = OpRegistry::Global().Create("_mul_scalar", {{"scalar", "2.5"}});
  ASSERT_TRUE(prop.ok());
  EXPECT_EQ((*prop)->GetParams().at("scalar"), "2.5");
}

TEST(SimpleOpTest, ShapeInference) {
  auto add = OpRegistry::Global().Create("elemwise_add", {});
  ASSERT_TRUE(add.ok());
  std::vector<Shape> in{Shape{2, 3}, Shape{}}, out(1), aux;
  ASSERT_TRUE(*(*add)->InferShape(&in, &out, &aux));
  EXPECT_EQ(in[1], (Shape{2, 3}));
  EXPECT_EQ(out[0], (Shape{2, 3}));

  std::vector<Shape> unknown(2), out2(1);
  EXPECT_FALSE(*(*add)->InferShape(&unknown, &out2, &aux));

  std::vector<Shape> bad{Shape{2, 3}, Shape{3, 2}}, out3(1);
  EXPECT_THAT((*add)->InferShape(&bad, &out3, &aux).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("(2,3)"), HasSubstr("(3,2)"))));

  auto smooth = OpRegistry::Global().Create("smooth_l1", {{"scalar", "0"}});
  ASSERT_TRUE(smooth.ok());
  std::vector<Shape> s_in{Shape{4}}, s_out(1);
  EXPECT_THAT((*smooth)->InferShape(&s_in, &s_out, &aux).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("non-zero")));
}

TEST(SimpleOpTest, NoKernelForAnUnregisteredDevice) {
  auto prop = OpRegistry::Global().Create("exp", {});
  ASSERT_TRUE(prop.ok());
#if !TESSERA_USE_CUDA
  EXPECT_THAT((*prop)->CreateOperator(Context::GPU(0)).status(),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("gpu(0)")));
#endif
  EXPECT_TRUE((*prop)->CreateOperator(Context::CPU()).ok());
}

TEST(SimpleOpTest, KernelsRejectIntegerDtypes) {
  auto checker = OpChecker::Create("exp", {}, {Shape{3}}, DType::kInt32);
  ASSERT_TRUE(checker.ok()) << checker.status();
  EXPECT_THAT((*checker)->Forward().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32")));
}

TEST(SimpleOpTest, HalfTypesComputeInFloat) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    auto checker = MakeChecker("square", {}, {Shape{16}}, dtype);
    ASSERT_NE(checker, nullptr);
    // Inputs are stored rounded; compare against the rounded inputs with half precision.
    checker->CheckForward(Unary([](double x) { return x * x; }), {2e-2, 1e-3});
  }
}

}  // namespace
}  // namespace tessera::ops

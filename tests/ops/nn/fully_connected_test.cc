// FullyConnected: forward against a float64 matrix product, backward against finite
// differences (every OpReqType through OpChecker), shape inference and parameter errors.
#include <memory>
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

constexpr Tolerance kForwardTol{.rtol = 1e-4, .atol = 1e-5};
constexpr Tolerance kGradTol{.rtol = 2e-2, .atol = 1e-3};

// out[m, h] = sum_k x[m, k] * w[h, k] + b[h] over the flattened data.
std::vector<Values> Reference(const std::vector<Values>& in, int64_t rows, int64_t k,
                              int64_t hidden, bool bias) {
  Values out(rows * hidden);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t h = 0; h < hidden; ++h) {
      double acc = bias ? in[2][h] : 0;
      for (int64_t i = 0; i < k; ++i) acc += in[0][m * k + i] * in[1][h * k + i];
      out[m * hidden + h] = acc;
    }
  }
  return {out};
}

void CheckCase(const KwArgs& kwargs, const Shape& data, int64_t rows, int64_t k, int64_t hidden,
               bool bias) {
  SCOPED_TRACE(data.ToString());
  auto checker = OpChecker::Create("FullyConnected", kwargs, {data});
  ASSERT_THAT(checker, IsOk());
  (*checker)->CheckForward(
      [&](const std::vector<Values>& in, const std::vector<Shape>&) {
        return Reference(in, rows, k, hidden, bias);
      },
      kForwardTol);
  (*checker)->CheckBackward(kGradTol, 1e-2);
}

TEST(FullyConnectedTest, FlattensAndMatchesReference) {
  CheckCase({{"num_hidden", "5"}}, Shape{3, 2, 4}, 3, 8, 5, true);
}

// Sizes past the 32x32 tiles the forward transposes its product through, in both axes.
TEST(FullyConnectedTest, ShapesAcrossTransposeTiles) {
  CheckCase({{"num_hidden", "40"}}, Shape{37, 45}, 37, 45, 40, true);
}

TEST(FullyConnectedTest, NoBias) {
  CheckCase({{"num_hidden", "7"}, {"no_bias", "true"}}, Shape{4, 6}, 4, 6, 7, false);
}

TEST(FullyConnectedTest, WithoutFlattenUsesLastAxis) {
  auto checker = OpChecker::Create("FullyConnected", {{"num_hidden", "3"}, {"flatten", "false"}},
                                   {Shape{2, 3, 4}});
  ASSERT_THAT(checker, IsOk());
  EXPECT_EQ((*checker)->out_shapes()[0], (Shape{2, 3, 3}));
  EXPECT_EQ((*checker)->in_shapes()[1], (Shape{3, 4}));
  CheckCase({{"num_hidden", "3"}, {"flatten", "false"}}, Shape{2, 3, 4}, 6, 4, 3, true);
}

TEST(FullyConnectedTest, InfersWeightAndBias) {
  auto prop = OpRegistry::Global().Create("FullyConnected", {{"num_hidden", "64"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{8, 28, 28}, Shape{}, Shape{}}, out(1), aux;
  auto known = (*prop)->InferShape(&in, &out, &aux);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  EXPECT_EQ(in[1], (Shape{64, 784}));
  EXPECT_EQ(in[2], (Shape{64}));
  EXPECT_EQ(out[0], (Shape{8, 64}));
  // Unknown data: not enough to infer yet.
  std::vector<Shape> in2{Shape{}, Shape{}, Shape{}}, out2(1);
  auto known2 = (*prop)->InferShape(&in2, &out2, &aux);
  ASSERT_THAT(known2, IsOk());
  EXPECT_FALSE(*known2);
}

TEST(FullyConnectedTest, WrongWeightShapeNamesBothShapes) {
  auto prop = OpRegistry::Global().Create("FullyConnected", {{"num_hidden", "64"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{8, 784}, Shape{64, 100}, Shape{}}, out(1), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("FullyConnected"), HasSubstr("weight"),
                             HasSubstr("(64,784)"), HasSubstr("(64,100)"))));
}

TEST(FullyConnectedTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("FullyConnected", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_hidden")));
  EXPECT_THAT(OpRegistry::Global().Create("FullyConnected", {{"num_hidden", "0"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_hidden")));
  EXPECT_THAT(OpRegistry::Global().Create("FullyConnected", {{"num_hidden", "4"}, {"bias", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bias")));
}

TEST(FullyConnectedTest, RejectsFloat64) {
  EXPECT_THAT(
      OpChecker::Create("FullyConnected", {{"num_hidden", "4"}}, {Shape{2, 3}}, DType::kFloat64),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("FullyConnected"), HasSubstr("float32"), HasSubstr("float64"))));
}

TEST(FullyConnectedTest, BackwardDoesNotNeedOutput) {
  auto prop = OpRegistry::Global().Create("FullyConnected", {{"num_hidden", "4"}});
  ASSERT_THAT(prop, IsOk());
  // ids: out_grad 0, data 1, weight 2, bias 3, output 4.
  EXPECT_THAT((*prop)->DeclareBackwardDependency({0}, {1, 2, 3}, {4}),
              ::testing::UnorderedElementsAre(0, 1, 2));
}

TEST(NnRegistryTest, EveryOperatorIsRegistered) {
  for (const char* name : {"FullyConnected", "Convolution", "Deconvolution", "Pooling",
                           "Activation", "BatchNorm", "softmax", "log_softmax", "SoftmaxOutput"}) {
    const OpInfo* info = OpRegistry::Global().Find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_FALSE(info->description.empty()) << name;
    auto prop = info->factory();
    EXPECT_EQ(prop->TypeString(), name);
  }
}

}  // namespace
}  // namespace tessera::ops

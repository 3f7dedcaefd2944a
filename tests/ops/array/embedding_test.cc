// Embedding: row lookup against a float64 reference, the weight gradient by finite
// differences and by hand for repeated indices, out-of-range indices, shapes.
#include <memory>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/array/array_test_util.h"

namespace tessera::ops::testing {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const KwArgs kArgs = {{"input_dim", "5"}, {"output_dim", "4"}};

std::vector<Values> LookupRef(const std::vector<Values>& in, const std::vector<Shape>&) {
  Values y;
  for (double index : in[0]) {
    const auto row = in[1].begin() + static_cast<int64_t>(index) * 4;
    y.insert(y.end(), row, row + 4);
  }
  return {y};
}

TEST(EmbeddingTest, ForwardAndWeightGradient) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    auto c = MakeChecker("Embedding", kArgs, {{2, 3}}, dtype);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->in_shapes()[1], (Shape{5, 4}));
    EXPECT_EQ(c->out_shapes()[0], (Shape{2, 3, 4}));
    c->SetInput(0, {0, 4, 2, 2, 1, 4});
    c->SkipGradient(0);  // indices are not differentiable
    c->CheckForward(LookupRef);
    if (dtype == DType::kFloat64) {
      c->CheckBackward();
    } else {
      c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
    }
  }
}

TEST(EmbeddingTest, RepeatedIndicesAccumulateAndDataGradientIsZero) {
  auto c = MakeChecker("Embedding", kArgs, {{3}});
  ASSERT_NE(c, nullptr);
  c->SetInput(0, {3, 1, 3});
  const Values og = {1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400};
  auto g = c->Backward({og});
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->at(0), (Values{0, 0, 0}));
  Values want(20, 0.0);
  for (int j = 0; j < 4; ++j) {
    want[1 * 4 + j] = og[4 + j];
    want[3 * 4 + j] = og[j] + og[8 + j];
  }
  EXPECT_EQ(g->at(1), want);
}

TEST(EmbeddingTest, OutOfRangeIndexIsAnErrorAtForward) {
  for (double bad : {5.0, -1.0, 1e9}) {
    auto c = MakeChecker("Embedding", kArgs, {{2, 2}});
    ASSERT_NE(c, nullptr);
    c->SetInput(0, {0, 1, bad, 2});
    EXPECT_THAT(c->Forward(), StatusIs(absl::StatusCode::kInvalidArgument,
                                       AllOf(HasSubstr("Embedding"), HasSubstr("position 2"),
                                             HasSubstr("[0, 5)"))));
  }
}

TEST(EmbeddingTest, ShapeInferenceAndErrors) {
  std::vector<Shape> in = {{}, {}}, out;
  auto known = InferShapes("Embedding", kArgs, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_FALSE(*known);
  EXPECT_EQ(in[1], (Shape{5, 4}));  // the weight is known from the parameters alone

  in = {{7}, {5, 3}};
  EXPECT_THAT(InferShapes("Embedding", kArgs, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Embedding"), HasSubstr("weight"), HasSubstr("(5,4)"),
                             HasSubstr("(5,3)"))));
  EXPECT_THAT(OpRegistry::Global().Create("Embedding", {{"input_dim", "5"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output_dim")));
  EXPECT_THAT(OpRegistry::Global().Create("Embedding", {{"input_dim", "0"}, {"output_dim", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input_dim")));
}

// MXNet's dtype (as Gluon writes it) fixes the weight's and output's type; sparse_grad loads.
TEST(EmbeddingTest, DtypeFixesTheWeightType) {
  auto prop = OpRegistry::Global().Create(
      "Embedding",
      {{"input_dim", "5"}, {"output_dim", "4"}, {"dtype", "float64"}, {"sparse_grad", "False"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<DType> in = {DType::kUnknown, DType::kUnknown}, out(1, DType::kUnknown), aux;
  ASSERT_THAT((*prop)->InferType(&in, &out, &aux), IsOk());
  EXPECT_EQ(in[1], DType::kFloat64);
  EXPECT_EQ(out[0], DType::kFloat64);
  EXPECT_EQ(in[0], DType::kFloat64);  // the indices share the weight's type

  std::vector<DType> mismatch = {DType::kUnknown, DType::kFloat32}, out1(1, DType::kUnknown);
  EXPECT_THAT((*prop)->InferType(&mismatch, &out1, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Embedding"), HasSubstr("float32"), HasSubstr("float64"))));
  std::vector<DType> data32 = {DType::kFloat32, DType::kUnknown}, out2(1, DType::kUnknown);
  EXPECT_THAT((*prop)->InferType(&data32, &out2, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float32")));

  // Unset (as MXNet writes it), the type follows the arrays.
  auto unset = OpRegistry::Global().Create(
      "Embedding", {{"input_dim", "5"}, {"output_dim", "4"}, {"dtype", "None"}});
  ASSERT_THAT(unset, IsOk());
  std::vector<DType> f32 = {DType::kFloat32, DType::kUnknown}, out3(1, DType::kUnknown);
  ASSERT_THAT((*unset)->InferType(&f32, &out3, &aux), IsOk());
  EXPECT_EQ(f32[1], DType::kFloat32);
  EXPECT_THAT(OpRegistry::Global().Create(
                  "Embedding", {{"input_dim", "5"}, {"output_dim", "4"}, {"dtype", "int7"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
}

}  // namespace
}  // namespace tessera::ops::testing

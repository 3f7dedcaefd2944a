// Embedding: row lookup against a float64 reference, the weight gradient by finite
// differences and by hand for repeated indices, out-of-range indices, shapes.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
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
  EXPECT_EQ(in[0], DType::kFloat64);  // unknown indices take the weight's type

  std::vector<DType> mismatch = {DType::kUnknown, DType::kFloat32}, out1(1, DType::kUnknown);
  EXPECT_THAT((*prop)->InferType(&mismatch, &out1, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Embedding"), HasSubstr("weight"), HasSubstr("float32"),
                             HasSubstr("float64"))));
  std::vector<DType> out_mismatch = {DType::kUnknown, DType::kUnknown}, out32(1, DType::kFloat32);
  EXPECT_THAT((*prop)->InferType(&out_mismatch, &out32, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output"), HasSubstr("float32"), HasSubstr("float64"))));
  // The indices keep their own type (MXNet's EmbeddingOpType).
  std::vector<DType> data32 = {DType::kFloat32, DType::kUnknown}, out2(1, DType::kUnknown);
  ASSERT_THAT((*prop)->InferType(&data32, &out2, &aux), IsOk());
  EXPECT_EQ(data32[0], DType::kFloat32);
  EXPECT_EQ(data32[1], DType::kFloat64);

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

TEST(EmbeddingTest, IntegerIndicesGetAFloat32WeightUnlessTold) {
  auto prop = OpRegistry::Global().Create("Embedding", kArgs);
  ASSERT_THAT(prop, IsOk());
  std::vector<DType> aux;
  for (DType index : {DType::kInt32, DType::kInt64, DType::kUInt8, DType::kInt8}) {
    std::vector<DType> in = {index, DType::kUnknown}, out(1, DType::kUnknown);
    ASSERT_THAT((*prop)->InferType(&in, &out, &aux), IsOk());
    EXPECT_EQ(in[0], index);
    EXPECT_EQ(in[1], DType::kFloat32);
    EXPECT_EQ(out[0], DType::kFloat32);
  }
  std::vector<DType> with_weight = {DType::kInt64, DType::kFloat64}, out(1, DType::kUnknown);
  ASSERT_THAT((*prop)->InferType(&with_weight, &out, &aux), IsOk());
  EXPECT_EQ(out[0], DType::kFloat64);
  std::vector<DType> int_weight = {DType::kInt32, DType::kInt32}, out1(1, DType::kUnknown);
  EXPECT_THAT((*prop)->InferType(&int_weight, &out1, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Embedding"), HasSubstr("int32"))));
}

// Forward and Backward of the operator itself on host buffers, indices of type I and a
// weight of type T, against the lookup and scatter done by hand.
template <typename T, typename I>
void CheckIntegerIndices() {
  SCOPED_TRACE(absl::StrCat(DTypeName(DTypeOf<T>()), " weight, ", DTypeName(DTypeOf<I>()),
                            " indices"));
  auto prop = OpRegistry::Global().Create("Embedding", kArgs);
  ASSERT_THAT(prop, IsOk());
  auto op = (*prop)->CreateOperator(Context::CPU());
  ASSERT_THAT(op, IsOk());
  std::vector<I> index = {3, 0, 4, 3, 1, 2};  // shape (2, 3); row 3 twice
  std::vector<T> weight(20);
  for (int i = 0; i < 20; ++i) weight[i] = static_cast<T>(0.5 * i - 3);
  std::vector<T> out(24, static_cast<T>(-99));
  const TBlob data_blob(index.data(), Shape{2, 3}), weight_blob(weight.data(), Shape{5, 4});
  const TBlob out_blob(out.data(), Shape{2, 3, 4});
  OpContext ctx;
  ctx.is_train = true;
  ASSERT_THAT((*op)->Forward(ctx, {data_blob, weight_blob}, {OpReqType::kWriteTo}, {out_blob}, {}),
              IsOk());
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) {
      ASSERT_EQ(static_cast<double>(out[i * 4 + j]), static_cast<double>(weight[index[i] * 4 + j]))
          << "row " << i << " column " << j;
    }
  }
  std::vector<T> out_grad(24);
  for (int i = 0; i < 24; ++i) out_grad[i] = static_cast<T>(i + 1);
  std::vector<I> data_grad(6, static_cast<I>(7));
  std::vector<T> weight_grad(20, static_cast<T>(-99));
  ASSERT_THAT((*op)->Backward(ctx, {TBlob(out_grad.data(), Shape{2, 3, 4})},
                              {data_blob, weight_blob}, {out_blob},
                              {OpReqType::kWriteTo, OpReqType::kWriteTo},
                              {TBlob(data_grad.data(), Shape{2, 3}),
                               TBlob(weight_grad.data(), Shape{5, 4})},
                              {}),
              IsOk());
  std::vector<double> want(20, 0.0);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) want[index[i] * 4 + j] += static_cast<double>(out_grad[i * 4 + j]);
  }
  for (int k = 0; k < 20; ++k) EXPECT_EQ(static_cast<double>(weight_grad[k]), want[k]) << k;
  for (I g : data_grad) EXPECT_EQ(g, static_cast<I>(0));

  std::vector<I> bad = {1, 5};
  std::vector<T> out2(8);
  EXPECT_THAT((*op)->Forward(ctx, {TBlob(bad.data(), Shape{2}), weight_blob},
                             {OpReqType::kWriteTo}, {TBlob(out2.data(), Shape{2, 4})}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("index 5"), HasSubstr("position 1"), HasSubstr("[0, 5)"))));
}

TEST(EmbeddingTest, IntegerIndicesLookUpAndScatterRows) {
  CheckIntegerIndices<float, int32_t>();
  CheckIntegerIndices<float, int64_t>();
  CheckIntegerIndices<float, uint8_t>();
  CheckIntegerIndices<double, int32_t>();
  CheckIntegerIndices<double, float>();
}

}  // namespace
}  // namespace tessera::ops::testing

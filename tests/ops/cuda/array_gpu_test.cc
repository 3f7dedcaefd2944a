// The array operators' GPU twins (ops/cuda/array_copy_ops.cc, cast.cc, amp_loss_scale.cc,
// elementwise_sum.cc, embedding.cc, loss_outputs.cc) against their CPU operators (ops/array): every operator,
// every parameter branch, every OpReqType and in-place option (the checker runs them all),
// in float32, float64, the half types and integer types where the CPU has them.
//
// Tolerances: data movement is exact, but the checker compares kAddTo against the sum taken
// in double, which the GPU rounds to the type once: half an ulp, so rtol 1e-5 (float32),
// 1e-12 (float64), 2e-3 (float16: 2^-11 per rounding), 1e-2 (bfloat16: 2^-8), and 0 for
// integer types (whole numbers in [0, 100) add exactly). Arithmetic agrees within the same
// bounds: sums over at most 20 terms in another order (ElementWiseSum's kAddTo, Embedding's
// atomics: a few float32 ulps of values below 20, hence atol 1e-5 too), expf / exp against
// glibc's (1-2 ulps), one rounding to a half type after either.
//
// What the checker cannot express: it draws one dtype for all outputs and out_grads, and
// integer out_grads / kAddTo prefills come from values in (-1, 1), which truncate to 0, so
// the integer cases check the backward of the movers only as zeros in and zeros out. The
// GPU's clamping of out-of-range Embedding indices (where the CPU fails) is not compared.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/ops/cuda/gpu_checker.h"

namespace tessera::ops::testing {
namespace {

struct ArrayCase {
  std::string name;  // test name
  GpuCase c;
};

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF64 = DType::kFloat64;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kI8 = DType::kInt8;
constexpr DType kI32 = DType::kInt32;
constexpr DType kI64 = DType::kInt64;
constexpr DType kU8 = DType::kUInt8;

ArrayCase Make(std::string name, std::string op, KwArgs kwargs, std::vector<Shape> shapes,
               DType dtype = kF32) {
  GpuCase c;
  c.op = std::move(op);
  c.kwargs = std::move(kwargs);
  c.in_shapes = std::move(shapes);
  c.dtype = dtype;
  switch (dtype) {
    case DType::kFloat64:
      c.rtol = c.atol = 1e-12;
      break;
    case DType::kFloat32:
      c.rtol = c.atol = 1e-5;
      break;
    case DType::kFloat16:
      c.rtol = c.atol = 2e-3;
      break;
    case DType::kBFloat16:
      c.rtol = c.atol = 1e-2;
      break;
    default:  // integers: random values in (-1, 1) would all truncate to 0
      c.rtol = c.atol = 0;
      for (size_t i = 0; i < c.in_shapes.size(); ++i) c.integer_inputs[static_cast<int>(i)] = 100;
      break;
  }
  return ArrayCase{std::move(name), std::move(c)};
}

// `a` with its first input of `type` (its outputs keep the case's dtype).
ArrayCase WithInputType(ArrayCase a, DType type) {
  a.c.input_dtypes[0] = type;
  return a;
}

// Embedding of `dtype` weights looked up by indices of `index_dtype` in [0, input_dim).
ArrayCase MakeEmbedding(std::string name, int input_dim, int output_dim, Shape data, DType dtype,
                        DType index_dtype) {
  ArrayCase a =
      Make(std::move(name), "Embedding",
           {{"input_dim", std::to_string(input_dim)}, {"output_dim", std::to_string(output_dim)}},
           {std::move(data)}, dtype);
  a.c.input_dtypes[0] = index_dtype;
  a.c.integer_inputs[0] = input_dim;
  return a;
}

std::vector<ArrayCase> CopyCases() {
  return {
      // Flatten and Reshape: contiguous copies of every dtype.
      Make("Flatten", "Flatten", {}, {{2, 3, 4}}),
      Make("Flatten64", "Flatten", {}, {{2, 3, 4}}, kF64),
      Make("FlattenInt8", "Flatten", {}, {{3, 5}}, kI8),
      Make("FlattenBF16", "Flatten", {}, {{2, 3, 2}}, kBF16),
      Make("ReshapeCopyDim", "Reshape", {{"shape", "(4,0,2)"}}, {{2, 3, 4}}),
      Make("ReshapeInfer", "Reshape", {{"shape", "(6,1,-1)"}}, {{2, 3, 4}}),
      Make("ReshapeRest", "Reshape", {{"shape", "(-2,1,1)"}}, {{2, 3, 4}}),
      Make("ReshapeMerge", "Reshape", {{"shape", "(-3,-3)"}}, {{2, 3, 4, 5}}),
      Make("ReshapeSplit", "Reshape", {{"shape", "(2,-4,-1,3,-2)"}}, {{2, 3, 4}}),
      Make("ReshapeReverse", "Reshape", {{"shape", "(-1,0)"}, {"reverse", "true"}}, {{10, 5, 4}}),
      Make("ReshapeReverseSplit", "Reshape", {{"shape", "(-4,-1,2,0)"}, {"reverse", "true"}},
           {{2, 12}}),
      Make("Reshape64", "Reshape", {{"shape", "(0,-1)"}}, {{2, 3, 4}}, kF64),
      Make("ReshapeInt32", "Reshape", {{"shape", "(-1,)"}}, {{3, 5}}, kI32),
      Make("ReshapeF16", "Reshape", {{"shape", "(3,-1)"}}, {{2, 3, 3}}, kF16),
      // Cast / amp_cast: a conversion each way (the input's type is the case's other one).
      WithInputType(Make("CastToF16", "Cast", {{"dtype", "float16"}}, {{3, 5}}, kF16), kF32),
      WithInputType(Make("CastFromBF16", "Cast", {{"dtype", "float32"}}, {{4, 3}}, kF32), kBF16),
      WithInputType(Make("AmpCastToBF16", "amp_cast", {{"dtype", "bfloat16"}}, {{2, 7}}, kBF16), kF32),
      Make("CastSameType", "Cast", {{"dtype", "float32"}}, {{5}}),
      // _amp_loss_scale: identity forward, the gradient times the (1,) scale (aux state).
      Make("AmpLossScale", "_amp_loss_scale", {}, {{4, 6}}),
      // BlockGrad: identity forward, zero gradient.
      Make("BlockGrad", "BlockGrad", {}, {{4, 5}}),
      Make("BlockGrad64", "BlockGrad", {}, {{3, 2, 2}}, kF64),
      Make("BlockGradInt64", "BlockGrad", {}, {{7}}, kI64),
      // transpose: the reversal by default, given axes (negative ones too), 2-D to 5-D; axes
      // kept together merge (and the contiguous tail of the last case moves widened).
      Make("Transpose2D", "transpose", {}, {{3, 5}}),
      Make("Transpose3DDefault", "transpose", {}, {{2, 3, 4}}),
      Make("Transpose3DAxes", "transpose", {{"axes", "(1,0,2)"}}, {{2, 3, 4}}),
      Make("Transpose3DNegative", "transpose", {{"axes", "(-1,0,1)"}}, {{2, 3, 4}}),
      Make("Transpose4D", "transpose", {{"axes", "(0,2,3,1)"}}, {{2, 3, 4, 5}}),
      Make("Transpose5D", "transpose", {{"axes", "(4,1,3,0,2)"}}, {{2, 3, 2, 4, 3}}),
      Make("TransposeUnitDim", "transpose", {{"axes", "(2,0,1)"}}, {{2, 1, 3}}),
      Make("TransposeMergedTail", "transpose", {{"axes", "(1,0,2,3)"}}, {{3, 4, 5, 6}}),
      Make("Transpose64", "transpose", {{"axes", "(2,0,1)"}}, {{3, 4, 5}}, kF64),
      Make("TransposeInt32", "transpose", {}, {{2, 3, 4}}, kI32),
      Make("TransposeF16", "transpose", {{"axes", "(0,2,1)"}}, {{2, 3, 5}}, kF16),
      // Concat: dims 0, 1 and last, 2 and 3 parts of unequal sizes. Dim 1 of (2, k, 8) float32
      // parts gives 16-byte aligned slabs (widened copies); the last dim's odd ones do not.
      Make("ConcatDim0", "Concat", {{"num_args", "2"}, {"dim", "0"}}, {{2, 3}, {4, 3}}),
      Make("ConcatDim1", "Concat", {{"num_args", "3"}, {"dim", "1"}},
           {{2, 1, 4}, {2, 3, 4}, {2, 2, 4}}),
      Make("ConcatDim1Wide", "Concat", {{"num_args", "2"}}, {{2, 4, 8}, {2, 2, 8}}),
      Make("ConcatLastNegative", "Concat", {{"num_args", "2"}, {"dim", "-1"}},
           {{3, 2, 5}, {3, 2, 1}}),
      Make("ConcatLast3", "Concat", {{"num_args", "3"}, {"dim", "2"}},
           {{2, 3, 1}, {2, 3, 4}, {2, 3, 2}}),
      Make("ConcatOne", "Concat", {{"num_args", "1"}, {"dim", "0"}}, {{3, 4}}),
      Make("Concat64", "Concat", {{"num_args", "3"}, {"dim", "0"}}, {{1, 4}, {2, 4}, {3, 4}}, kF64),
      Make("ConcatInt8", "Concat", {{"num_args", "2"}, {"dim", "1"}}, {{2, 3}, {2, 5}}, kI8),
      Make("ConcatF16", "Concat", {{"num_args", "2"}, {"dim", "1"}}, {{2, 2, 3}, {2, 4, 3}}, kF16),
      Make("ConcatBF16", "Concat", {{"num_args", "2"}, {"dim", "-1"}}, {{3, 2}, {3, 3}}, kBF16),
      // SliceChannel: 2 and 3 outputs along axes 0, 1 and last; squeeze_axis (a 1-D input
      // squeezes into (1,) pieces).
      Make("SliceChannel2Axis1", "SliceChannel", {{"num_outputs", "2"}}, {{4, 6, 3}}),
      Make("SliceChannel3Axis0", "SliceChannel", {{"num_outputs", "3"}, {"axis", "0"}}, {{6, 2}}),
      Make("SliceChannel2Last", "SliceChannel", {{"num_outputs", "2"}, {"axis", "-1"}},
           {{2, 3, 4}}),
      Make("SliceChannel3LastPositive", "SliceChannel", {{"num_outputs", "3"}, {"axis", "2"}},
           {{2, 2, 9}}),
      Make("SliceChannelSqueeze", "SliceChannel",
           {{"num_outputs", "3"}, {"axis", "1"}, {"squeeze_axis", "true"}}, {{2, 3, 4}}),
      Make("SliceChannelSqueeze1D", "SliceChannel",
           {{"num_outputs", "3"}, {"axis", "0"}, {"squeeze_axis", "true"}}, {{3}}),
      Make("SliceChannelWide", "SliceChannel", {{"num_outputs", "2"}}, {{2, 8, 4}}),
      Make("SliceChannel64", "SliceChannel", {{"num_outputs", "2"}, {"axis", "0"}}, {{4, 3}}, kF64),
      Make("SliceChannelInt32", "SliceChannel", {{"num_outputs", "3"}, {"axis", "-1"}}, {{2, 6}},
           kI32),
      Make("SliceChannelF16", "SliceChannel", {{"num_outputs", "2"}}, {{2, 4, 3}}, kF16),
  };
}

std::vector<ArrayCase> ArithmeticCases() {
  const std::vector<Shape> twenty(20, Shape{3, 7});
  return {
      // ElementWiseSum / add_n: 20 inputs cross the 16 pointers of one launch.
      Make("Sum1", "ElementWiseSum", {{"num_args", "1"}}, {{4, 5}}),
      Make("Sum2", "ElementWiseSum", {{"num_args", "2"}}, {{4, 5}, {4, 5}}),
      Make("Sum3", "ElementWiseSum", {{"num_args", "3"}}, {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}),
      Make("Sum20", "ElementWiseSum", {{"num_args", "20"}}, twenty),
      Make("Sum20F64", "ElementWiseSum", {{"num_args", "20"}}, twenty, kF64),
      Make("Sum3F16", "ElementWiseSum", {{"num_args", "3"}}, {{5, 3}, {5, 3}, {5, 3}}, kF16),
      Make("Sum2BF16", "ElementWiseSum", {{"num_args", "2"}}, {{5, 3}, {5, 3}}, kBF16),
      Make("Sum3Int32", "ElementWiseSum", {{"num_args", "3"}}, {{6}, {6}, {6}}, kI32),
      Make("AddN2", "add_n", {{"num_args", "2"}}, {{3, 4}, {3, 4}}),
      // Embedding: weights float32 / float64 (and the half types, summed in float scratch),
      // indices of several dtypes; 12 indices into 5 rows repeat, so the atomics collide.
      MakeEmbedding("EmbeddingInt32", 5, 4, {3, 4}, kF32, kI32),
      MakeEmbedding("EmbeddingInt64", 5, 3, {12}, kF32, kI64),
      MakeEmbedding("EmbeddingUInt8", 7, 4, {2, 3, 2}, kF32, kU8),
      MakeEmbedding("EmbeddingFloatIndices", 5, 4, {6, 2}, kF32, kF32),
      MakeEmbedding("Embedding64Int32", 6, 5, {4, 3}, kF64, kI32),
      MakeEmbedding("Embedding64Int64", 4, 3, {10}, kF64, kI64),
      MakeEmbedding("Embedding64FloatIndices", 5, 2, {3, 3}, kF64, kF64),
      MakeEmbedding("EmbeddingF16", 5, 8, {4, 3}, kF16, kI32),
      MakeEmbedding("EmbeddingBF16", 4, 6, {9}, kBF16, kI8),
      // The regression heads: grad_scale default and given, a (n,) label for (n, 1) data, the
      // mean over several outputs per example.
      Make("LinearRegression", "LinearRegressionOutput", {}, {{4, 3}, {4, 3}}),
      Make("LinearRegressionScaled", "LinearRegressionOutput", {{"grad_scale", "0.5"}},
           {{2, 3, 4}, {2, 3, 4}}),
      Make("LinearRegressionFlatLabel", "LinearRegressionOutput", {}, {{5, 1}, {5}}),
      Make("LinearRegression64", "LinearRegressionOutput", {{"grad_scale", "3"}}, {{4, 2}, {4, 2}},
           kF64),
      Make("LogisticRegression", "LogisticRegressionOutput", {}, {{4, 3}, {4, 3}}),
      Make("LogisticRegressionScaled", "LogisticRegressionOutput", {{"grad_scale", "2.5"}},
           {{3, 5}, {3, 5}}),
      Make("LogisticRegression64", "LogisticRegressionOutput", {}, {{6, 1}, {6}}, kF64),
      Make("LogisticRegressionF16", "LogisticRegressionOutput", {}, {{4, 3}, {4, 3}}, kF16),
      Make("MAERegression", "MAERegressionOutput", {}, {{4, 3}, {4, 3}}),
      Make("MAERegressionScaled", "MAERegressionOutput", {{"grad_scale", "0.25"}},
           {{2, 2, 3}, {2, 2, 3}}),
      Make("MAERegression64", "MAERegressionOutput", {}, {{5, 2}, {5, 2}}, kF64),
      Make("MAERegressionBF16", "MAERegressionOutput", {{"grad_scale", "2"}}, {{3, 4}, {3, 4}},
           kBF16),
      // MakeLoss: each normalization; 'valid' with some, none (norm 1) and all outputs above
      // the threshold.
      Make("MakeLoss", "MakeLoss", {}, {{4, 3}}),
      Make("MakeLossScaled", "MakeLoss", {{"grad_scale", "0.5"}, {"normalization", "null"}},
           {{4, 3}}),
      Make("MakeLossBatch", "MakeLoss", {{"normalization", "batch"}, {"grad_scale", "2"}},
           {{5, 2, 2}}),
      Make("MakeLossValid", "MakeLoss", {{"normalization", "valid"}, {"valid_thresh", "0.2"}},
           {{6, 5}}),
      Make("MakeLossValidNone", "MakeLoss", {{"normalization", "valid"}, {"valid_thresh", "2"}},
           {{3, 4}}),
      Make("MakeLossValidAll", "MakeLoss",
           {{"normalization", "valid"}, {"valid_thresh", "-2"}, {"grad_scale", "3"}}, {{2, 7}}),
      Make("MakeLoss64", "MakeLoss", {{"normalization", "valid"}}, {{4, 4}}, kF64),
      Make("MakeLossBatch64", "MakeLoss", {{"normalization", "batch"}}, {{3, 2}}, kF64),
      Make("MakeLossF16", "MakeLoss", {{"normalization", "valid"}, {"valid_thresh", "0.5"}},
           {{4, 5}}, kF16),
  };
}

std::vector<ArrayCase> AllCases() {
  std::vector<ArrayCase> all = CopyCases();
  for (ArrayCase& a : ArithmeticCases()) all.push_back(std::move(a));
  return all;
}

class ArrayGpuTest : public ::testing::TestWithParam<ArrayCase> {};

TEST_P(ArrayGpuTest, AgreesWithCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckGpuAgainstCpu(GetParam().c);
}

// Runs everywhere: the case is valid and the CPU reference and GPU operator can be created.
TEST_P(ArrayGpuTest, CaseValidWithoutGpu) { CheckCaseWithoutGpu(GetParam().c); }

INSTANTIATE_TEST_SUITE_P(Ops, ArrayGpuTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<ArrayCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tessera::ops::testing

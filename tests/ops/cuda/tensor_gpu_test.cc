// Reductions, broadcasting binary operators, dot and batch_dot on the GPU against the CPU
// operators of //ops/tensor; float32 (dot: cuBLAS) and float64 (the own kernels).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/ops/cuda/gpu_checker.h"

namespace tessera::ops::testing {
namespace {

struct TensorCase {
  std::string name;
  GpuCase c;
};

std::vector<TensorCase> Cases() {
  auto make = [](std::string name, std::string op, KwArgs kwargs, std::vector<Shape> shapes,
                 DType dtype = DType::kFloat32, bool positive = false) {
    GpuCase c;
    c.op = std::move(op);
    c.kwargs = std::move(kwargs);
    c.in_shapes = std::move(shapes);
    c.dtype = dtype;
    c.positive = positive;
    c.rtol = dtype == DType::kFloat64 ? 1e-10 : 1e-4;
    c.atol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
    return TensorCase{std::move(name), std::move(c)};
  };
  const DType f64 = DType::kFloat64;
  return {
      make("SumAll", "sum", {}, {{3, 4, 5}}),
      make("SumAxis1", "sum", {{"axis", "(1,)"}}, {{3, 4, 5}}),
      make("SumAxes0m1KeepDims", "sum", {{"axis", "(0,-1)"}, {"keepdims", "true"}}, {{3, 4, 5}}),
      make("SumExclude", "sum", {{"axis", "(1,)"}, {"exclude", "true"}}, {{3, 4, 5}}, f64),
      make("MeanAxis2", "mean", {{"axis", "(2,)"}}, {{3, 4, 5}}),
      make("MeanAll64", "mean", {}, {{6, 7}}, f64),
      make("MaxAxis0", "max", {{"axis", "(0,)"}}, {{5, 4, 3}}),
      make("MaxAll64", "max", {}, {{4, 9}}, f64),
      make("BroadcastAdd", "broadcast_add", {}, {{2, 1, 4}, {3, 1}}),
      make("BroadcastSub", "broadcast_sub", {}, {{2, 3, 4}, {1, 3, 1}}),
      make("BroadcastMul", "broadcast_mul", {}, {{4, 1}, {1, 5}}, f64),
      make("BroadcastDiv", "broadcast_div", {}, {{2, 3, 4}, {4}}),
      make("BroadcastDivSame", "broadcast_div", {}, {{3, 4}, {3, 4}}, f64),
      make("BroadcastPower", "broadcast_power", {}, {{2, 3}, {3}}, f64, /*positive=*/true),
      make("BroadcastMaximum", "broadcast_maximum", {}, {{3, 1, 2}, {3, 4, 1}}),
      make("BroadcastMinimum", "broadcast_minimum", {}, {{5, 2}, {1, 2}}, f64),
      make("Dot", "dot", {}, {{3, 4}, {4, 5}}),
      make("DotTransposeA", "dot", {{"transpose_a", "true"}}, {{4, 3}, {4, 5}}),
      make("DotTransposeB", "dot", {{"transpose_b", "true"}}, {{3, 4}, {5, 4}}),
      make("DotTransposeBoth", "dot", {{"transpose_a", "true"}, {"transpose_b", "true"}},
           {{4, 3}, {5, 4}}),
      make("DotND", "dot", {}, {{2, 3, 4}, {4, 2, 3}}),
      make("DotVectorMatrix", "dot", {}, {{4}, {4, 3}}),
      make("DotVectorVector", "dot", {}, {{6}, {6}}),
      make("BatchDot", "batch_dot", {}, {{3, 2, 4}, {3, 4, 5}}),
      make("BatchDotTransposed", "batch_dot", {{"transpose_a", "true"}, {"transpose_b", "true"}},
           {{3, 4, 2}, {3, 5, 4}}),
  };
}

class TensorGpuTest : public ::testing::TestWithParam<TensorCase> {};

TEST_P(TensorGpuTest, AgreesWithCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckGpuAgainstCpu(GetParam().c);
}

// Runs everywhere: the case is valid and the CPU reference and GPU operator can be created.
TEST_P(TensorGpuTest, CaseValidWithoutGpu) {
  GpuCase c = GetParam().c;
  if (!c.is_train) c.backward = false;
  CheckCaseWithoutGpu(c);
}

INSTANTIATE_TEST_SUITE_P(Ops, TensorGpuTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<TensorCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tessera::ops::testing

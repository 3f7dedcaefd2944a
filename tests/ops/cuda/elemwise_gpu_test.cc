// The elementwise SimpleOps' GPU functions against their CPU functions, float32 and float64.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/ops/cuda/gpu_checker.h"

namespace tessera::ops::testing {
namespace {

struct ElemCase {
  std::string op;
  std::string scalar;  // empty: no scalar argument
  int arity = 1;
  bool positive = false;  // the function needs positive inputs (sqrt, log, ...)
};

std::string Name(const ::testing::TestParamInfo<ElemCase>& info) {
  // gtest names allow letters, digits and '_': the op names fit.
  return info.param.op;
}

class ElemwiseGpuTest : public ::testing::TestWithParam<ElemCase> {
 protected:
  GpuCase Case(DType dtype) const {
    const ElemCase& e = GetParam();
    GpuCase c;
    c.op = e.op;
    if (!e.scalar.empty()) c.kwargs = {{"scalar", e.scalar}};
    c.in_shapes.assign(e.arity, Shape{3, 5, 7});
    c.dtype = dtype;
    c.positive = e.positive;
    c.rtol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
    c.atol = dtype == DType::kFloat64 ? 1e-12 : 1e-6;
    return c;
  }
  void Check(DType dtype) {
    TESSERA_SKIP_WITHOUT_GPU();
    CheckGpuAgainstCpu(Case(dtype));
  }
};

TEST_P(ElemwiseGpuTest, Float32) { Check(DType::kFloat32); }
TEST_P(ElemwiseGpuTest, Float64) { Check(DType::kFloat64); }
// Runs everywhere: the case is valid and the CPU reference and GPU operator can be created.
TEST_P(ElemwiseGpuTest, CaseValidWithoutGpu) { CheckCaseWithoutGpu(Case(DType::kFloat32)); }

INSTANTIATE_TEST_SUITE_P(
    Ops, ElemwiseGpuTest,
    ::testing::Values(ElemCase{"negative"}, ElemCase{"abs"}, ElemCase{"square"},
                      ElemCase{"sqrt", "", 1, true}, ElemCase{"rsqrt", "", 1, true},
                      ElemCase{"exp"}, ElemCase{"log", "", 1, true}, ElemCase{"sin"},
                      ElemCase{"cos"}, ElemCase{"reciprocal"}, ElemCase{"smooth_l1", "1.5"},
                      ElemCase{"_plus_scalar", "0.7"}, ElemCase{"_minus_scalar", "0.7"},
                      ElemCase{"_rminus_scalar", "0.7"}, ElemCase{"_mul_scalar", "-1.3"},
                      ElemCase{"_div_scalar", "1.3"}, ElemCase{"_rdiv_scalar", "1.3"},
                      ElemCase{"_power_scalar", "2.5", 1, true}, ElemCase{"_rpower_scalar", "1.7"},
                      ElemCase{"elemwise_add", "", 2}, ElemCase{"elemwise_sub", "", 2},
                      ElemCase{"elemwise_mul", "", 2}, ElemCase{"elemwise_div", "", 2}),
    Name);

}  // namespace
}  // namespace tessera::ops::testing

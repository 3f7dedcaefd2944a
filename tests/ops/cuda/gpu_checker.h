// GpuChecker: runs one registered operator on cpu(0) and on gpu(0) with the same random inputs
// and expects the GPU results to agree with the CPU ones - the CPU kernels being the
// reference implementations, themselves checked against float64 references in tests/ops.
//
// For every output and input gradient it checks each OpReqType: kWriteTo (outputs pre-filled
// with NaN, so reading them shows), kAddTo (pre-filled with random values the result must be
// added to), kNullOp (must stay untouched, bit for bit) and kWriteInplace for each pair of
// Forward/BackwardInplaceOption. Aux states (BatchNorm's moving statistics) are compared after
// forward. Backward on the GPU reads the GPU forward's outputs.
//
// Without a GPU the checks cannot run: NoGpuReason() (tests/gpu_test_util.h) says why, and
// TESSERA_SKIP_WITHOUT_GPU() skips. Built without CUDA (no --config=cuda) the whole harness
// compiles to that reason.
#ifndef TESSERA_TESTS_OPS_CUDA_GPU_CHECKER_H_
#define TESSERA_TESTS_OPS_CUDA_GPU_CHECKER_H_

#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/param.h"
#include "tests/gpu_test_util.h"

namespace tessera::ops::testing {

using ::tessera::testing::NoGpuReason;

struct GpuCase {
  std::string op;
  KwArgs kwargs;
  std::vector<Shape> in_shapes;  // the arguments' shapes (the rest is inferred)
  DType dtype = DType::kFloat32;
  bool positive = false;  // inputs in [0.1, 1] instead of [-1, -0.1] U [0.1, 1]
  // Inputs that hold class labels or indices: input index -> n, the input gets integers drawn
  // from [0, n) (stored in its dtype). Their gradients are compared like any other.
  std::map<int, int> integer_inputs;
  // Inputs whose dtype differs from `dtype` (Embedding's int32 indices): input index -> dtype.
  std::map<int, DType> input_dtypes;
  bool is_train = true;
  bool backward = true;
  double rtol = 1e-4;
  double atol = 1e-5;
};

// gtest assertions; call only when NoGpuReason() is empty.
void CheckGpuAgainstCpu(const GpuCase& c);

// What can be checked without a GPU: the case's kwargs and shapes make a property, the CPU
// reference runs forward (and backward), and - in a CUDA build - the GPU operator is created
// (its factory parses the parameters; no device is touched). gtest assertions.
void CheckCaseWithoutGpu(const GpuCase& c);

}  // namespace tessera::ops::testing

#endif  // TESSERA_TESTS_OPS_CUDA_GPU_CHECKER_H_

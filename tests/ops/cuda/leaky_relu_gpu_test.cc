// LeakyReLU's deterministic types on the GPU against the CPU operator (ops/array): leaky, elu
// (positive and negative slopes: backward reads y or x), prelu on 1-D, 2-D and 4-D data (its
// per-channel gamma gradient reduced over the other axes; and one gamma for all), selu, gelu,
// float32 and float64; and rrelu in inference, whose slope is the bounds' mean. Tolerances: both
// sides evaluate the same expressions; float32 differs by the last bits of exp / erf (1e-5
// relative, 1e-6 absolute), float64 likewise (1e-12, 1e-13); prelu's gamma gradient is summed in
// double on both sides, in another order.
//
// rrelu has its own test below instead of the GpuCase checker: its hidden `mask` output is
// state for backward, written whole even under kAddTo (as the CPU does), which the checker's
// kAddTo expectation (old value + result) does not describe.
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tblob.h"
#include "gtest/gtest.h"
#include "ndarray/runtime.h"
#include "ops/operator.h"
#include "ops/registry.h"
#include "tests/ops/cuda/device_array.h"
#include "tests/ops/cuda/gpu_checker.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::ops::testing {
namespace {

struct LeakyCase {
  std::string name;
  GpuCase c;
};

std::vector<LeakyCase> Cases() {
  std::vector<LeakyCase> cases;
  auto add = [&cases](std::string name, KwArgs kwargs, std::vector<Shape> shapes) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      GpuCase c;
      c.op = "LeakyReLU";
      c.kwargs = kwargs;
      c.in_shapes = shapes;
      c.dtype = dtype;
      c.rtol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
      c.atol = dtype == DType::kFloat64 ? 1e-13 : 1e-6;
      cases.push_back({name + (dtype == DType::kFloat64 ? "Float64" : "Float32"), std::move(c)});
    }
  };
  add("Leaky", {{"act_type", "leaky"}, {"slope", "0.1"}}, {{4, 5, 3}});
  add("LeakyDefaultSlope", {}, {{6, 7}});
  add("LeakyNegativeSlope", {{"act_type", "leaky"}, {"slope", "-0.2"}}, {{4, 5}});
  add("Elu", {{"act_type", "elu"}, {"slope", "0.3"}}, {{4, 5, 3}});
  add("EluNegativeSlope", {{"act_type", "elu"}, {"slope", "-0.5"}}, {{3, 8}});
  add("PReLU1D", {{"act_type", "prelu"}}, {{9}});
  add("PReLU2D", {{"act_type", "prelu"}}, {{6, 4}});
  add("PReLU4D", {{"act_type", "prelu"}}, {{2, 3, 4, 5}});
  add("PReLU4DSharedGamma", {{"act_type", "prelu"}}, {{2, 3, 4, 5}, {1}});
  add("Selu", {{"act_type", "selu"}}, {{4, 5, 3}});
  add("Gelu", {{"act_type", "gelu"}}, {{4, 5, 3}});
  return cases;
}

// Failure messages name the case instead of dumping its bytes.
void PrintTo(const LeakyCase& c, std::ostream* os) { *os << c.name; }

class LeakyReLUGpuTest : public ::testing::TestWithParam<LeakyCase> {};

TEST_P(LeakyReLUGpuTest, AgreesWithCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckGpuAgainstCpu(GetParam().c);
}

// Runs everywhere: the case is valid and the CPU reference and GPU operator can be created.
TEST_P(LeakyReLUGpuTest, CaseValidWithoutGpu) { CheckCaseWithoutGpu(GetParam().c); }

INSTANTIATE_TEST_SUITE_P(Ops, LeakyReLUGpuTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<LeakyCase>& info) {
                           return info.param.name;
                         });

TEST(LeakyReLURReluGpuTest, InferenceCaseValidWithoutGpu) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    GpuCase c;
    c.op = "LeakyReLU";
    c.kwargs = {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.3"}};
    c.in_shapes = {{5, 6}};
    c.dtype = dtype;
    c.is_train = false;
    CheckCaseWithoutGpu(c);
  }
}

#if TESSERA_USE_CUDA

void ExpectNear(const Values& gpu, const Values& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_NEAR(gpu[i], cpu[i], tol * (1 + std::abs(cpu[i]))) << what << ", element " << i;
  }
}

// rrelu in inference: slope (lower + upper) / 2 everywhere, no random draws; the mask holds
// that slope, written whole whatever the output's req; backward applies it below 0.
TEST(LeakyReLURReluGpuTest, InferenceAgreesWithCpu) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const double tol = dtype == DType::kFloat64 ? 1e-13 : 1e-6;
    auto prop = OpRegistry::Global().Create(
        "LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.3"}});
    ASSERT_TRUE(prop.ok()) << prop.status();
    const Shape shape{5, 6};
    auto cpu_op = (*prop)->CreateOperator(Context::CPU());
    auto gpu_op = (*prop)->CreateOperator(Context::GPU(0));
    ASSERT_TRUE(cpu_op.ok() && gpu_op.ok()) << gpu_op.status();
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    Values x(shape.Size()), og(shape.Size()), old(shape.Size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = u(rng), og[i] = u(rng), old[i] = u(rng);

    // CPU reference: forward (y, mask), backward.
    std::vector<char> xb = ToBytes(x, dtype), yb = ToBytes(Values(x.size()), dtype),
                      mb = ToBytes(Values(x.size()), dtype), ob = ToBytes(og, dtype),
                      gb = ToBytes(Values(x.size()), dtype);
    auto host = [&](std::vector<char>& b) { return TBlob(b.data(), shape, dtype); };
    OpContext cpu_ctx;
    cpu_ctx.run_ctx.ctx = Context::CPU();
    ASSERT_TRUE((*cpu_op)
                    ->Forward(cpu_ctx, {host(xb)}, {OpReqType::kWriteTo, OpReqType::kWriteTo},
                              {host(yb), host(mb)}, {})
                    .ok());
    ASSERT_TRUE((*cpu_op)
                    ->Backward(cpu_ctx, {host(ob)}, {host(xb)}, {host(yb), host(mb)},
                               {OpReqType::kWriteTo}, {host(gb)}, {})
                    .ok());
    const Values cpu_y = FromBytes(yb, dtype), cpu_mask = FromBytes(mb, dtype),
                 cpu_grad = FromBytes(gb, dtype);
    for (double m : cpu_mask) ASSERT_NEAR(m, 0.2, 1e-7);

    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    OpContext ctx;
    ctx.run_ctx.ctx = Context::GPU(0);
    ctx.run_ctx.stream = stream;
    // Forward per req; the mask is written whole either way.
    DeviceArray dx(x, dtype), dy(old, dtype), dmask(old, dtype);
    ASSERT_TRUE((*gpu_op)
                    ->Forward(ctx, {dx.blob(shape)}, {OpReqType::kWriteTo, OpReqType::kWriteTo},
                              {dy.blob(shape), dmask.blob(shape)}, {})
                    .ok());
    ExpectNear(dy.Download(), cpu_y, tol, "output (kWriteTo)");
    ExpectNear(dmask.Download(), cpu_mask, tol, "mask (kWriteTo)");
    {
      DeviceArray ay(old, dtype), amask(old, dtype);
      ASSERT_TRUE((*gpu_op)
                      ->Forward(ctx, {dx.blob(shape)}, {OpReqType::kAddTo, OpReqType::kAddTo},
                                {ay.blob(shape), amask.blob(shape)}, {})
                      .ok());
      Values want = cpu_y;
      for (size_t i = 0; i < want.size(); ++i) want[i] += old[i];
      ExpectNear(ay.Download(), want, tol, "output (kAddTo)");
      ExpectNear(amask.Download(), cpu_mask, tol, "mask (overwritten under kAddTo)");
    }
    // Backward per req from the kWriteTo forward's output and mask.
    for (OpReqType req : {OpReqType::kWriteTo, OpReqType::kAddTo}) {
      DeviceArray dog(og, dtype), dgrad(old, dtype);
      ASSERT_TRUE((*gpu_op)
                      ->Backward(ctx, {dog.blob(shape)}, {dx.blob(shape)},
                                 {dy.blob(shape), dmask.blob(shape)}, {req}, {dgrad.blob(shape)},
                                 {})
                      .ok());
      Values want = cpu_grad;
      if (req == OpReqType::kAddTo) {
        for (size_t i = 0; i < want.size(); ++i) want[i] += old[i];
      }
      ExpectNear(dgrad.Download(), want, tol,
                 req == OpReqType::kAddTo ? "gradient (kAddTo)" : "gradient (kWriteTo)");
    }
    cudaStreamDestroy(stream);
  }
}

#endif  // TESSERA_USE_CUDA

}  // namespace
}  // namespace tessera::ops::testing

// The GPU operators whose output is random - Dropout (all modes and axes) and LeakyReLU's rrelu
// while training - with the runtime's kRandom resources. They cannot agree with the CPU element
// by element from independent generators, so these tests check what must hold: outputs are 0
// or x / (1 - p) (rrelu: slopes within the bounds), the kept fraction lies within a binomial
// bound, backward applies exactly the forward's mask, inference is the identity, one seed
// gives one mask. And, since the GPU kernels draw in the CPU's order with the CPU's arithmetic,
// a GPU and a CPU generator put in the same state give the same mask bit for bit and end at
// the same stream position. Skips without a GPU (the parameter checks run everywhere).
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tblob.h"
#include "engine/philox.h"
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

// Parameter parsing of the GPU operators and the CPU reference, for every mode.
TEST(RandomOpsGpuTest, CasesValidWithoutGpu) {
  const std::vector<std::pair<std::string, KwArgs>> cases = {
      {"Dropout", {{"p", "0.3"}}},
      {"Dropout", {{"p", "0.5"}, {"mode", "always"}}},
      {"Dropout", {{"p", "0.5"}, {"axes", "(1,)"}}},
      {"Dropout", {{"p", "0.25"}, {"axes", "(0,2)"}, {"cudnn_off", "true"}}},
      {"Dropout", {{"p", "0"}}},
      {"LeakyReLU", {{"act_type", "rrelu"}}},
      {"LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "-0.2"}, {"upper_bound", "0.4"}}},
  };
  for (const auto& [op, kwargs] : cases) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      GpuCase c;
      c.op = op;
      c.kwargs = kwargs;
      c.in_shapes = {{4, 3, 5}};
      c.dtype = dtype;
      CheckCaseWithoutGpu(c);
    }
  }
}

#if TESSERA_USE_CUDA

// a * b (or old + a * b) in dtype t's arithmetic, as the kernels compute it.
double MulIn(double a, double b, DType t) {
  return t == DType::kFloat32 ? static_cast<double>(static_cast<float>(a) * static_cast<float>(b))
                              : a * b;
}

Values RandomValues(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Values v(n);
  for (double& x : v) x = u(rng);
  return v;
}

struct Outputs {
  Values y, mask;
};

// One operator with input `data` and outputs (output, mask) - Dropout, rrelu - on cpu(0) and
// gpu(0), drawing from a runtime's kRandom resources.
class Runner {
 public:
  Runner(const std::string& op, const KwArgs& kwargs, Shape shape, DType dtype, uint64_t seed)
      : shape_(std::move(shape)), dtype_(dtype) {
    auto runtime = OwnedRuntime::Create(seed);
    EXPECT_TRUE(runtime.ok()) << runtime.status();
    if (!runtime.ok()) return;
    runtime_ = std::move(*runtime);
    auto prop = OpRegistry::Global().Create(op, kwargs);
    EXPECT_TRUE(prop.ok()) << prop.status();
    if (!prop.ok()) return;
    prop_ = std::move(*prop);
    EXPECT_EQ(prop_->NumOutputs(), 2);
    auto cpu = prop_->CreateOperator(Context::CPU());
    auto gpu = prop_->CreateOperator(Context::GPU(0));
    EXPECT_TRUE(cpu.ok() && gpu.ok()) << cpu.status() << " " << gpu.status();
    if (!cpu.ok() || !gpu.ok()) return;
    cpu_op_ = std::move(*cpu);
    gpu_op_ = std::move(*gpu);
    engine::ResourceManager* resources = runtime_->get().resources;
    auto cpu_res = resources->Request(Context::CPU(), {ResourceRequest::kRandom});
    auto gpu_res = resources->Request(Context::GPU(0), {ResourceRequest::kRandom});
    EXPECT_TRUE(cpu_res.ok() && gpu_res.ok());
    if (!cpu_res.ok() || !gpu_res.ok()) return;
    cpu_res_ = *cpu_res;
    gpu_res_ = *gpu_res;
    EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ok_ = true;
  }
  ~Runner() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  bool ok() const { return ok_; }
  int64_t size() const { return shape_.Size(); }
  engine::PhiloxRandom* cpu_gen() const { return cpu_res_.get_random(); }
  engine::PhiloxRandom* gpu_gen() const { return gpu_res_.get_random(); }

  Outputs CpuForward(const Values& x, bool is_train) {
    std::vector<char> xb = ToBytes(x, dtype_), yb = ToBytes(Values(size()), dtype_),
                      mb = ToBytes(Values(size()), dtype_);
    OpContext ctx;
    ctx.is_train = is_train;
    ctx.run_ctx.ctx = Context::CPU();
    ctx.requested = {cpu_res_};
    const absl::Status s = cpu_op_->Forward(
        ctx, {Host(xb)}, {OpReqType::kWriteTo, OpReqType::kWriteTo}, {Host(yb), Host(mb)}, {});
    EXPECT_TRUE(s.ok()) << s;
    return {FromBytes(yb, dtype_), FromBytes(mb, dtype_)};
  }

  // GPU forward with the outputs pre-filled with `old`; `in_place` makes the output the
  // input's buffer (kWriteInplace).
  Outputs GpuForward(const Values& x, bool is_train, OpReqType y_req, OpReqType mask_req,
                     const Values& old, bool in_place = false) {
    DeviceArray dx(x, dtype_), dy(old, dtype_), dmask(old, dtype_);
    OpContext ctx = GpuContext(is_train);
    const TBlob y = in_place ? dx.blob(shape_) : dy.blob(shape_);
    const absl::Status s = gpu_op_->Forward(ctx, {dx.blob(shape_)},
                                            {in_place ? OpReqType::kWriteInplace : y_req, mask_req},
                                            {y, dmask.blob(shape_)}, {});
    EXPECT_TRUE(s.ok()) << s;
    return {in_place ? dx.Download() : dy.Download(), dmask.Download()};
  }

  // GPU backward from the forward's outputs; in_grad pre-filled with `old`, or (in_place)
  // the out_grad buffer itself.
  Values GpuBackward(const Values& og, const Values& x, const Outputs& fwd, OpReqType req,
                     const Values& old, bool in_place = false) {
    DeviceArray dog(og, dtype_), dx(x, dtype_), dy(fwd.y, dtype_), dmask(fwd.mask, dtype_),
        dgrad(old, dtype_);
    const absl::Status s = gpu_op_->Backward(
        GpuContext(true), {dog.blob(shape_)}, {dx.blob(shape_)},
        {dy.blob(shape_), dmask.blob(shape_)}, {in_place ? OpReqType::kWriteInplace : req},
        {in_place ? dog.blob(shape_) : dgrad.blob(shape_)}, {});
    EXPECT_TRUE(s.ok()) << s;
    return in_place ? dog.Download() : dgrad.Download();
  }

 private:
  TBlob Host(std::vector<char>& b) const {  // field by field: see Device::blob
    TBlob blob;
    blob.dptr = b.data();
    blob.shape = shape_;
    blob.dtype = dtype_;
    return blob;
  }
  OpContext GpuContext(bool is_train) const {
    OpContext ctx;
    ctx.is_train = is_train;
    ctx.run_ctx.ctx = Context::GPU(0);
    ctx.run_ctx.stream = stream_;
    ctx.requested = {gpu_res_};
    return ctx;
  }

  Shape shape_;
  DType dtype_;
  std::unique_ptr<OwnedRuntime> runtime_;
  std::unique_ptr<OperatorProperty> prop_;
  std::unique_ptr<Operator> cpu_op_, gpu_op_;
  engine::Resource cpu_res_, gpu_res_;
  cudaStream_t stream_ = nullptr;
  bool ok_ = false;
};

const Values& Nans(int64_t n) {
  static const Values* v = new Values(1 << 16, NAN);
  EXPECT_LE(n, static_cast<int64_t>(v->size()));
  return *v;
}
Values Prefix(const Values& v, int64_t n) { return Values(v.begin(), v.begin() + n); }

struct SameStateCase {
  std::string name;
  std::string op;
  KwArgs kwargs;
  Shape shape;
  DType dtype;
};

// Failure messages name the case instead of dumping its bytes.
void PrintTo(const SameStateCase& c, std::ostream* os) { *os << c.name; }

class SameStateTest : public ::testing::TestWithParam<SameStateCase> {};

// A GPU generator and a CPU generator in one state (not block-aligned, to exercise the lane
// arithmetic) give identical outputs and masks, twice in a row, and end in one state.
TEST_P(SameStateTest, GpuMaskEqualsCpuMaskBitForBit) {
  TESSERA_SKIP_WITHOUT_GPU();
  const SameStateCase& c = GetParam();
  Runner r(c.op, c.kwargs, c.shape, c.dtype, /*seed=*/17);
  ASSERT_TRUE(r.ok());
  r.gpu_gen()->Skip(3);
  *r.cpu_gen() = *r.gpu_gen();
  const int64_t n = r.size();
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call);
    const Values x = Representable(RandomValues(n, 100 + call), c.dtype);
    const Outputs cpu = r.CpuForward(x, /*is_train=*/true);
    const Outputs gpu =
        r.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
    EXPECT_EQ(gpu.mask, cpu.mask);
    EXPECT_EQ(gpu.y, cpu.y);
    EXPECT_EQ(r.gpu_gen()->position(), r.cpu_gen()->position());
  }
  // The draws were used, not repeated: a third call from here differs from the first.
  EXPECT_GT(r.gpu_gen()->position(), 3u);
}

INSTANTIATE_TEST_SUITE_P(
    Ops, SameStateTest,
    ::testing::Values(
        SameStateCase{"DropoutFloat32", "Dropout", {{"p", "0.3"}}, {50, 41}, DType::kFloat32},
        SameStateCase{"DropoutFloat64", "Dropout", {{"p", "0.7"}}, {7, 3, 11}, DType::kFloat64},
        SameStateCase{"DropoutAxes1",
                      "Dropout",
                      {{"p", "0.5"}, {"axes", "(1,)"}},
                      {6, 5, 7},
                      DType::kFloat32},
        SameStateCase{"DropoutAxes0And2",
                      "Dropout",
                      {{"p", "0.4"}, {"axes", "(0,-1)"}},
                      {3, 4, 5, 6},
                      DType::kFloat64},
        SameStateCase{"DropoutAxesAdjacent",
                      "Dropout",
                      {{"p", "0.5"}, {"axes", "(1,2)"}},
                      {4, 3, 2, 5},
                      DType::kFloat32},
        SameStateCase{
            "DropoutAlways", "Dropout", {{"p", "0.2"}, {"mode", "always"}}, {33}, DType::kFloat32},
        SameStateCase{"RReluFloat32",
                      "LeakyReLU",
                      {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.4"}},
                      {30, 17},
                      DType::kFloat32},
        SameStateCase{"RReluFloat64NegativeBound",
                      "LeakyReLU",
                      {{"act_type", "rrelu"}, {"lower_bound", "-0.3"}, {"upper_bound", "0.5"}},
                      {9, 13},
                      DType::kFloat64}),
    [](const ::testing::TestParamInfo<SameStateCase>& info) { return info.param.name; });

// Outputs are 0 or x * 1/(1-p) (in the element type), the mask the factor applied, and the
// dropped fraction is p within 4.5 standard deviations of a binomial count.
TEST(DropoutGpuTest, KeepsAFractionAndScales) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (double p : {0.1, 0.5, 0.8}) {
      SCOPED_TRACE(p);
      Runner r("Dropout", {{"p", absl::StrCat(p)}}, {100, 100}, dtype, 1);
      ASSERT_TRUE(r.ok());
      const int64_t n = r.size();
      const Values x = Representable(RandomValues(n, 1), dtype);
      const Outputs out =
          r.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
      const double scale = Representable({1.0 / (1.0 - p)}, dtype)[0];
      int64_t dropped = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (out.mask[i] == 0) {
          ++dropped;
          ASSERT_EQ(out.y[i], 0) << i;
        } else {
          ASSERT_EQ(out.mask[i], scale) << i;
          ASSERT_EQ(out.y[i], MulIn(x[i], scale, dtype)) << i;
        }
      }
      EXPECT_NEAR(static_cast<double>(dropped) / n, p, 4.5 * std::sqrt(p * (1 - p) / n));
      EXPECT_EQ(r.gpu_gen()->position(), static_cast<uint64_t>(n));
    }
  }
}

// Backward is out_grad * mask for the forward's mask, per req and in place.
TEST(DropoutGpuTest, BackwardAppliesTheForwardMask) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Runner r("Dropout", {{"p", "0.4"}}, {40, 25}, dtype, 3);
    ASSERT_TRUE(r.ok());
    const int64_t n = r.size();
    const Values x = Representable(RandomValues(n, 2), dtype),
                 og = Representable(RandomValues(n, 3), dtype),
                 old = Representable(RandomValues(n, 4), dtype);
    const Outputs fwd =
        r.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
    const Values g = r.GpuBackward(og, x, fwd, OpReqType::kWriteTo, Prefix(Nans(n), n));
    const Values added = r.GpuBackward(og, x, fwd, OpReqType::kAddTo, old);
    const Values in_place = r.GpuBackward(og, x, fwd, OpReqType::kWriteTo, old, true);
    const Values untouched = r.GpuBackward(og, x, fwd, OpReqType::kNullOp, old);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = MulIn(og[i], fwd.mask[i], dtype);
      kept += fwd.mask[i] != 0;
      ASSERT_EQ(g[i], want) << i;
      ASSERT_EQ(in_place[i], want) << i;
      ASSERT_NEAR(added[i], old[i] + want, 1e-6 * (1 + std::abs(old[i] + want))) << i;
      ASSERT_EQ(untouched[i], old[i]) << i;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, n);
  }
}

// One seed, one mask; the next call draws new positions and so another mask.
TEST(DropoutGpuTest, SameSeedSameMaskNextCallDiffers) {
  TESSERA_SKIP_WITHOUT_GPU();
  Runner a("Dropout", {{"p", "0.5"}}, {64, 64}, DType::kFloat32, 7);
  Runner b("Dropout", {{"p", "0.5"}}, {64, 64}, DType::kFloat32, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t n = a.size();
  const Values x = Representable(RandomValues(n, 5), DType::kFloat32);
  const Outputs a1 =
      a.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
  const Outputs b1 =
      b.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
  EXPECT_EQ(a1.mask, b1.mask);
  const Outputs a2 =
      a.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += (a1.mask[i] == 0) == (a2.mask[i] == 0);
  EXPECT_LT(same, n * 6 / 10);
}

// Inference (mode 'training') and p = 0 are the identity with a mask of ones and no draws;
// mode 'always' drops at inference too.
TEST(DropoutGpuTest, IdentityUnlessDropping) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const std::vector<std::pair<KwArgs, bool>> identities = {
        {KwArgs{{"p", "0.5"}}, /*is_train=*/false}, {KwArgs{{"p", "0"}}, /*is_train=*/true}};
    for (const auto& [kwargs, is_train] : identities) {
      Runner r("Dropout", kwargs, {20, 30}, dtype, 2);
      ASSERT_TRUE(r.ok());
      const int64_t n = r.size();
      const Values x = Representable(RandomValues(n, 6), dtype),
                   old = Representable(RandomValues(n, 7), dtype);
      const Outputs out =
          r.GpuForward(x, is_train, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
      EXPECT_EQ(out.y, x);
      EXPECT_EQ(out.mask, Values(n, 1.0));
      const Outputs added = r.GpuForward(x, is_train, OpReqType::kAddTo, OpReqType::kAddTo, old);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(added.y[i], old[i] + x[i], 1e-6) << i;
        ASSERT_EQ(added.mask[i], 1.0) << i;  // state for backward: overwritten
      }
      EXPECT_EQ(r.gpu_gen()->position(), 0u);
    }
    Runner r("Dropout", {{"p", "0.5"}, {"mode", "always"}}, {100, 100}, dtype, 2);
    ASSERT_TRUE(r.ok());
    const int64_t n = r.size();
    const Outputs out = r.GpuForward(Representable(RandomValues(n, 8), dtype), /*is_train=*/false,
                                     OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
    int64_t dropped = 0;
    for (double m : out.mask) dropped += m == 0;
    EXPECT_NEAR(static_cast<double>(dropped) / n, 0.5, 4.5 * 0.5 / 100);
  }
}

// axes=(1,) on (N, T, C): one decision per (n, c), the same at every t.
TEST(DropoutGpuTest, AxesShareOneDecisionAlongThem) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (const char* axes : {"(1,)", "(-2,)"}) {
    Runner r("Dropout", {{"p", "0.5"}, {"axes", axes}}, {40, 6, 50}, DType::kFloat64, 4);
    ASSERT_TRUE(r.ok());
    const int64_t n = r.size();
    const Outputs out = r.GpuForward(Representable(RandomValues(n, 9), DType::kFloat64), true,
                                     OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
    int64_t dropped = 0;
    for (int64_t b = 0; b < 40; ++b) {
      for (int64_t c = 0; c < 50; ++c) {
        const double m = out.mask[(b * 6) * 50 + c];
        dropped += m == 0;
        for (int64_t t = 1; t < 6; ++t) ASSERT_EQ(out.mask[(b * 6 + t) * 50 + c], m);
      }
    }
    // 2000 decisions drawn, no more.
    EXPECT_EQ(r.gpu_gen()->position(), 2000u);
    EXPECT_NEAR(dropped / 2000.0, 0.5, 4.5 * 0.5 / std::sqrt(2000.0));
  }
}

// The output's req: kNullOp leaves it untouched but the mask is still drawn and written (and
// the generator advanced, as the CPU's); kAddTo adds; in place overwrites the input.
TEST(DropoutGpuTest, OutputReqs) {
  TESSERA_SKIP_WITHOUT_GPU();
  Runner r("Dropout", {{"p", "0.3"}}, {30, 20}, DType::kFloat32, 5);
  ASSERT_TRUE(r.ok());
  const int64_t n = r.size();
  const Values x = Representable(RandomValues(n, 10), DType::kFloat32),
               old = Representable(RandomValues(n, 11), DType::kFloat32);
  *r.cpu_gen() = *r.gpu_gen();
  const Outputs cpu = r.CpuForward(x, true);
  const Outputs null_y = r.GpuForward(x, true, OpReqType::kNullOp, OpReqType::kWriteTo, old);
  EXPECT_EQ(null_y.y, old);
  EXPECT_EQ(null_y.mask, cpu.mask);
  EXPECT_EQ(r.gpu_gen()->position(), static_cast<uint64_t>(n));
  // From here on both generators again agree.
  const Outputs cpu2 = r.CpuForward(x, true);
  const Outputs added = r.GpuForward(x, true, OpReqType::kAddTo, OpReqType::kNullOp, old);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(added.y[i], old[i] + cpu2.y[i], 1e-6) << i;
  EXPECT_EQ(added.mask, old);  // kNullOp: not written
  const Outputs cpu3 = r.CpuForward(x, true);
  const Outputs in_place =
      r.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, old, /*in_place=*/true);
  EXPECT_EQ(in_place.y, cpu3.y);
  EXPECT_EQ(in_place.mask, cpu3.mask);
}

// rrelu while training: a slope per element within [lower, upper], spread over the range,
// y = x or slope * x, backward with the same slopes; the same state gives the CPU's slopes
// (SameStateTest).
TEST(RReluGpuTest, TrainingSlopesWithinBoundsAndBackwardUsesThem) {
  TESSERA_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Runner r("LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.4"}},
             {100, 50}, dtype, 6);
    ASSERT_TRUE(r.ok());
    const int64_t n = r.size();
    const Values x = Representable(RandomValues(n, 12), dtype),
                 og = Representable(RandomValues(n, 13), dtype);
    const Outputs fwd =
        r.GpuForward(x, true, OpReqType::kWriteTo, OpReqType::kWriteTo, Prefix(Nans(n), n));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double s = fwd.mask[i];
      ASSERT_GE(s, Representable({0.1}, dtype)[0]) << i;
      ASSERT_LE(s, Representable({0.4}, dtype)[0]) << i;
      sum += s;
      ASSERT_EQ(fwd.y[i], x[i] > 0 ? x[i] : MulIn(s, x[i], dtype)) << i;
    }
    // Uniform on [0.1, 0.4]: mean 0.25, standard deviation 0.3 / sqrt(12) per slope.
    EXPECT_NEAR(sum / n, 0.25, 4.5 * 0.3 / std::sqrt(12.0 * n));
    EXPECT_EQ(r.gpu_gen()->position(), static_cast<uint64_t>(n));
    const Values g = r.GpuBackward(og, x, fwd, OpReqType::kWriteTo, Prefix(Nans(n), n));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(g[i], x[i] > 0 ? og[i] : MulIn(fwd.mask[i], og[i], dtype)) << i;
    }
  }
}

#else  // !TESSERA_USE_CUDA

TEST(RandomOpsGpuTest, NeedsCuda) { GTEST_SKIP() << "no CUDA device: " << NoGpuReason(); }

#endif  // TESSERA_USE_CUDA

}  // namespace
}  // namespace tessera::ops::testing

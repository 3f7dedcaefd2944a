// GpuChecker (see gpu_checker.h).
#include "tests/ops/cuda/gpu_checker.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/tblob.h"
#include "gtest/gtest.h"
#include "ndarray/runtime.h"
#include "ops/operator.h"
#include "ops/registry.h"
#include "tests/ops/cuda/device_array.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::ops::testing {

namespace {

// The case's argument dtypes: `dtype` unless input_dtypes says otherwise.
std::vector<DType> InputTypes(const GpuCase& c, size_t n) {
  std::vector<DType> types(n, c.dtype);
  for (const auto& [index, dtype] : c.input_dtypes) {
    if (index >= 0 && static_cast<size_t>(index) < n) types[index] = dtype;
  }
  return types;
}

absl::Status RunCaseWithoutGpu(const GpuCase& c) {
  ASSIGN_OR_RETURN(std::unique_ptr<OwnedRuntime> runtime, OwnedRuntime::Create(1));
  ASSIGN_OR_RETURN(std::unique_ptr<OperatorProperty> prop,
                   OpRegistry::Global().Create(c.op, c.kwargs));
  std::vector<Shape> in = c.in_shapes, out(prop->NumOutputs()),
                     aux(prop->ListAuxiliaryStates().size());
  in.resize(prop->ListArguments().size());
  ASSIGN_OR_RETURN(bool known, prop->InferShape(&in, &out, &aux));
  if (!known) return absl::InvalidArgumentError("shapes not inferred");
  std::vector<DType> it = InputTypes(c, in.size()), ot(out.size(), DType::kUnknown),
                     at(aux.size(), DType::kUnknown);
  ASSIGN_OR_RETURN(known, prop->InferType(&it, &ot, &at));
  if (!known) return absl::InvalidArgumentError("types not inferred");
  ASSIGN_OR_RETURN(std::unique_ptr<Operator> op, prop->CreateOperator(Context::CPU()));
  auto buffers = [&](const std::vector<Shape>& shapes, double value,
                     std::vector<std::vector<double>>* storage) {
    std::vector<TBlob> blobs;
    for (const Shape& s : shapes) storage->emplace_back(s.Size(), value);
    for (size_t i = 0; i < shapes.size(); ++i) {
      blobs.emplace_back((*storage)[i].data(), shapes[i], DType::kFloat64, Context::CPU());
    }
    return blobs;
  };
  // Values only need to be valid inputs here (positive: log, sqrt, variances).
  std::vector<std::vector<double>> in_s, out_s, aux_s, og_s, grad_s;
  std::vector<TBlob> in_b = buffers(in, 0.5, &in_s), out_b = buffers(out, 0, &out_s),
                     aux_b = buffers(aux, 0.5, &aux_s);
  std::vector<std::vector<char>> bytes;
  // Integer inputs (labels, indices) get 0, every other value 0.5.
  auto retype = [&](std::vector<TBlob>* blobs, const std::vector<DType>& types, bool inputs) {
    for (size_t k = 0; k < blobs->size(); ++k) {
      TBlob& b = (*blobs)[k];
      const DType t = types[k];
      const double v = inputs && c.integer_inputs.count(static_cast<int>(k)) ? 0.0 : 0.5;
      bytes.emplace_back(b.Size() * DTypeSize(t));
      TESSERA_TYPE_SWITCH(t, T,
                          {
                            T* p = reinterpret_cast<T*>(bytes.back().data());
                            for (int64_t i = 0; i < b.Size(); ++i)
                              p[i] = static_cast<T>(static_cast<AccType<T>>(v));
                          },
                          {});
      b = TBlob(bytes.back().data(), b.shape, t, Context::CPU());
    }
  };
  retype(&in_b, it, true);
  retype(&out_b, ot, false);
  retype(&aux_b, at, false);
  OpContext ctx;
  ctx.is_train = c.is_train;
  ctx.run_ctx.ctx = Context::CPU();
  for (const ResourceRequest& r : prop->ForwardResource(in)) {
    ASSIGN_OR_RETURN(engine::Resource res, runtime->get().resources->Request(Context::CPU(), r));
    ctx.requested.push_back(res);
  }
  RETURN_IF_ERROR(op->Forward(ctx, in_b, std::vector<OpReqType>(out.size(), OpReqType::kWriteTo),
                              out_b, aux_b));
  if (c.backward) {
    std::vector<Shape> og(out.begin(), out.begin() + prop->NumVisibleOutputs());
    std::vector<TBlob> og_b = buffers(og, 0.5, &og_s), grad_b = buffers(in, 0, &grad_s);
    retype(&og_b, std::vector<DType>(ot.begin(), ot.begin() + og.size()), false);
    retype(&grad_b, it, false);
    ctx.requested.clear();
    for (const ResourceRequest& r : prop->BackwardResource(in)) {
      ASSIGN_OR_RETURN(engine::Resource res, runtime->get().resources->Request(Context::CPU(), r));
      ctx.requested.push_back(res);
    }
    RETURN_IF_ERROR(op->Backward(ctx, og_b, in_b, out_b,
                                 std::vector<OpReqType>(in.size(), OpReqType::kWriteTo), grad_b,
                                 aux_b));
  }
#if TESSERA_USE_CUDA
  absl::StatusOr<std::unique_ptr<Operator>> gpu = CreateGpuOperator(*prop, Context::GPU(0));
  if (absl::IsUnimplemented(gpu.status())) gpu = prop->CreateOperator(Context::GPU(0));
  RETURN_IF_ERROR(gpu.status());
#endif
  return absl::OkStatus();
}

}  // namespace

void CheckCaseWithoutGpu(const GpuCase& c) {
  const absl::Status s = RunCaseWithoutGpu(c);
  EXPECT_TRUE(s.ok()) << c.op << ": " << s;
}

#if !TESSERA_USE_CUDA

void CheckGpuAgainstCpu(const GpuCase&) { GTEST_SKIP() << "no CUDA device: " << NoGpuReason(); }

#else  // TESSERA_USE_CUDA

namespace {

Values Random(int64_t n, bool positive, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> magnitude(0.1, 1.0);
  std::bernoulli_distribution negative(0.5);
  Values v(n);
  for (double& x : v) x = (!positive && negative(rng)) ? -magnitude(rng) : magnitude(rng);
  return v;
}

// Integers in [0, n), as doubles (labels and indices).
Values RandomIntegers(int64_t size, int n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, n - 1);
  Values v(size);
  for (double& x : v) x = pick(rng);
  return v;
}

using Buffers = std::vector<std::unique_ptr<DeviceArray>>;

Buffers Allocate(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
  Buffers b;
  for (size_t i = 0; i < shapes.size(); ++i) {
    b.push_back(std::make_unique<DeviceArray>(shapes[i], dtypes[i]));
  }
  return b;
}

std::vector<TBlob> Blobs(const Buffers& b) {
  std::vector<TBlob> blobs;
  for (const auto& buf : b) blobs.push_back(buf->blob());
  return blobs;
}

Values Filled(int64_t n, double v) { return Values(n, v); }

Values Plus(const Values& a, const Values& b) {
  Values r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}

void ExpectNear(const Values& gpu, const Values& cpu, double rtol, double atol,
                const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const bool ok = !std::isnan(gpu[i]) && !std::isnan(cpu[i]) &&
                    std::abs(gpu[i] - cpu[i]) <= atol + rtol * std::abs(cpu[i]);
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " is " << gpu[i] << " on the GPU, " << cpu[i]
                    << " on the CPU";
      if (++reported == 5) return;
    }
  }
}

std::vector<int> Iota(int begin, int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = begin + i;
  return v;
}

// Everything one case needs, on both devices.
class Checker {
 public:
  explicit Checker(const GpuCase& c) : c_(c), rng_(42) {}
  ~Checker() {
    // Device buffers and the stream go before the runtime (declared first, destroyed last).
    gpu_in_.clear();
    gpu_out_.clear();
    gpu_aux_.clear();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  void Run() {
    ASSERT_TRUE(Setup().ok());
    ASSERT_NO_FATAL_FAILURE(RunCpu());
    ASSERT_NO_FATAL_FAILURE(CheckForward());
    if (c_.backward) {
      ASSERT_NO_FATAL_FAILURE(CheckBackward());
    }
  }

 private:
  absl::Status Setup() {
    absl::Status s = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(runtime_, OwnedRuntime::Create(1));
      ASSIGN_OR_RETURN(prop_, OpRegistry::Global().Create(c_.op, c_.kwargs));
      in_shapes_ = c_.in_shapes;
      in_shapes_.resize(prop_->ListArguments().size());
      out_shapes_.resize(prop_->NumOutputs());
      aux_shapes_.resize(prop_->ListAuxiliaryStates().size());
      ASSIGN_OR_RETURN(bool known, prop_->InferShape(&in_shapes_, &out_shapes_, &aux_shapes_));
      if (!known) return absl::InvalidArgumentError("shapes not inferred");
      in_types_ = InputTypes(c_, in_shapes_.size());
      out_types_.assign(out_shapes_.size(), DType::kUnknown);
      aux_types_.assign(aux_shapes_.size(), DType::kUnknown);
      ASSIGN_OR_RETURN(known, prop_->InferType(&in_types_, &out_types_, &aux_types_));
      if (!known) return absl::InvalidArgumentError("types not inferred");
      ASSIGN_OR_RETURN(cpu_op_, prop_->CreateOperator(Context::CPU()));
      absl::StatusOr<std::unique_ptr<Operator>> gpu = CreateGpuOperator(*prop_, Context::GPU(0));
      // SimpleOps carry their GPU functions in their own property, not the factory registry.
      if (absl::IsUnimplemented(gpu.status())) gpu = prop_->CreateOperator(Context::GPU(0));
      ASSIGN_OR_RETURN(gpu_op_, std::move(gpu));
      for (size_t i = 0; i < in_shapes_.size(); ++i) {
        auto integer = c_.integer_inputs.find(static_cast<int>(i));
        inputs_.push_back(integer != c_.integer_inputs.end()
                              ? RandomIntegers(in_shapes_[i].Size(), integer->second, rng_)
                              : Random(in_shapes_[i].Size(), c_.positive, rng_));
      }
      // Aux states are statistics (a variance must be positive).
      for (const Shape& s : aux_shapes_) aux_.push_back(Random(s.Size(), true, rng_));
      nv_ = prop_->NumVisibleOutputs();
      for (int i = 0; i < nv_; ++i)
        out_grads_.push_back(Random(out_shapes_[i].Size(), false, rng_));
      for (const ResourceRequest& r : prop_->ForwardResource(in_shapes_)) {
        ASSIGN_OR_RETURN(engine::Resource res,
                         runtime_->get().resources->Request(Context::CPU(), r));
        cpu_fwd_res_.push_back(res);
        ASSIGN_OR_RETURN(res, runtime_->get().resources->Request(Context::GPU(0), r));
        gpu_fwd_res_.push_back(res);
      }
      for (const ResourceRequest& r : prop_->BackwardResource(in_shapes_)) {
        ASSIGN_OR_RETURN(engine::Resource res,
                         runtime_->get().resources->Request(Context::CPU(), r));
        cpu_bwd_res_.push_back(res);
        ASSIGN_OR_RETURN(res, runtime_->get().resources->Request(Context::GPU(0), r));
        gpu_bwd_res_.push_back(res);
      }
      if (cudaStreamCreate(&stream_) != cudaSuccess) return absl::InternalError("cudaStreamCreate");
      return absl::OkStatus();
    }();
    EXPECT_TRUE(s.ok()) << c_.op << ": " << s;
    return s;
  }

  OpContext Ctx(bool gpu, bool forward) const {
    OpContext ctx;
    ctx.is_train = c_.is_train;
    ctx.run_ctx.ctx = gpu ? Context::GPU(0) : Context::CPU();
    ctx.run_ctx.stream = gpu ? static_cast<void*>(stream_) : nullptr;
    ctx.requested =
        gpu ? (forward ? gpu_fwd_res_ : gpu_bwd_res_) : (forward ? cpu_fwd_res_ : cpu_bwd_res_);
    return ctx;
  }

  // Host blobs over vectors of bytes.
  struct Host {
    std::vector<std::vector<char>> bytes;
    std::vector<TBlob> blobs;
    Host(const std::vector<Values>& values, const std::vector<Shape>& shapes,
         const std::vector<DType>& types) {
      for (size_t i = 0; i < shapes.size(); ++i) bytes.push_back(ToBytes(values[i], types[i]));
      for (size_t i = 0; i < shapes.size(); ++i) {
        blobs.emplace_back(bytes[i].data(), shapes[i], types[i], Context::CPU());
      }
    }
    Values Get(size_t i) const {
      return FromBytes(bytes[i].data(), blobs[i].Size(), blobs[i].dtype);
    }
  };

  std::vector<Values> Zeros(const std::vector<Shape>& shapes) const {
    std::vector<Values> v;
    for (const Shape& s : shapes) v.push_back(Filled(s.Size(), 0));
    return v;
  }

  void RunCpu() {
    Host in(inputs_, in_shapes_, in_types_), out(Zeros(out_shapes_), out_shapes_, out_types_),
        aux(aux_, aux_shapes_, aux_types_);
    std::vector<OpReqType> req(out_shapes_.size(), OpReqType::kWriteTo);
    absl::Status s = cpu_op_->Forward(Ctx(false, true), in.blobs, req, out.blobs, aux.blobs);
    ASSERT_TRUE(s.ok()) << c_.op << " CPU forward: " << s;
    for (size_t i = 0; i < out_shapes_.size(); ++i) cpu_out_.push_back(out.Get(i));
    for (size_t i = 0; i < aux_shapes_.size(); ++i) cpu_aux_.push_back(aux.Get(i));
    if (!c_.backward) return;
    std::vector<Shape> og_shapes(out_shapes_.begin(), out_shapes_.begin() + nv_);
    Host og(out_grads_, og_shapes, OutGradTypes()), grad(Zeros(in_shapes_), in_shapes_, in_types_);
    std::vector<OpReqType> greq(in_shapes_.size(), OpReqType::kWriteTo);
    s = cpu_op_->Backward(Ctx(false, false), og.blobs, in.blobs, out.blobs, greq, grad.blobs,
                          aux.blobs);
    ASSERT_TRUE(s.ok()) << c_.op << " CPU backward: " << s;
    for (size_t i = 0; i < in_shapes_.size(); ++i) cpu_grad_.push_back(grad.Get(i));
  }

  // GPU forward with `req` on every output (kWriteInplace on `inplace_out`, aliasing input
  // `inplace_in`); outputs pre-filled with `prefill`. Returns the outputs and leaves the
  // device buffers of inputs / outputs / aux in gpu_in_ / gpu_out_ / gpu_aux_.
  absl::Status GpuForward(OpReqType req, const std::vector<Values>& prefill, int inplace_in = -1,
                          int inplace_out = -1) {
    gpu_in_ = Allocate(in_shapes_, in_types_);
    gpu_out_ = Allocate(out_shapes_, out_types_);
    gpu_aux_ = Allocate(aux_shapes_, aux_types_);
    for (size_t i = 0; i < in_shapes_.size(); ++i) gpu_in_[i]->Upload(inputs_[i]);
    for (size_t i = 0; i < out_shapes_.size(); ++i) gpu_out_[i]->Upload(prefill[i]);
    for (size_t i = 0; i < aux_shapes_.size(); ++i) gpu_aux_[i]->Upload(aux_[i]);
    std::vector<TBlob> in = Blobs(gpu_in_), out = Blobs(gpu_out_);
    std::vector<OpReqType> reqs(out_shapes_.size(), req);
    if (inplace_out >= 0) {
      out[inplace_out] = in[inplace_in];
      reqs[inplace_out] = OpReqType::kWriteInplace;
    }
    RETURN_IF_ERROR(gpu_op_->Forward(Ctx(true, true), in, reqs, out, Blobs(gpu_aux_)));
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("kernel failed: ", cudaGetErrorString(cudaGetLastError())));
    }
    gpu_out_values_.clear();
    for (size_t i = 0; i < out_shapes_.size(); ++i) {
      gpu_out_values_.push_back(inplace_out == static_cast<int>(i) ? gpu_in_[inplace_in]->Download()
                                                                   : gpu_out_[i]->Download());
    }
    return absl::OkStatus();
  }

  void CheckForward() {
    const std::string& op = c_.op;
    // kWriteTo
    std::vector<Values> nan, added, seven;
    for (size_t i = 0; i < out_shapes_.size(); ++i) {
      const int64_t n = out_shapes_[i].Size();
      const DType t = out_types_[i];
      // Integer buffers cannot hold NaN or fractions: a sentinel every integer type holds, and
      // whole numbers instead.
      nan.push_back(Filled(n, IsFloatingPoint(t) ? NAN : 77.0));
      added.push_back(Representable(Random(n, false, rng_), t));
      seven.push_back(Filled(n, 7.0));
    }
    absl::Status s = GpuForward(OpReqType::kWriteTo, nan);
    ASSERT_TRUE(s.ok()) << op << " GPU forward: " << s;
    for (size_t i = 0; i < out_shapes_.size(); ++i) {
      ExpectNear(gpu_out_values_[i], cpu_out_[i], c_.rtol, c_.atol,
                 absl::StrCat(op, " forward output ", i, " (kWriteTo)"));
    }
    for (size_t i = 0; i < aux_shapes_.size(); ++i) {
      ExpectNear(gpu_aux_[i]->Download(), cpu_aux_[i], c_.rtol, c_.atol,
                 absl::StrCat(op, " aux state ", i, " after forward"));
    }
    // kAddTo
    s = GpuForward(OpReqType::kAddTo, added);
    ASSERT_TRUE(s.ok()) << op << " GPU forward (kAddTo): " << s;
    for (size_t i = 0; i < out_shapes_.size(); ++i) {
      ExpectNear(gpu_out_values_[i], Plus(added[i], cpu_out_[i]), c_.rtol, c_.atol,
                 absl::StrCat(op, " forward output ", i, " (kAddTo)"));
    }
    // kNullOp
    s = GpuForward(OpReqType::kNullOp, seven);
    ASSERT_TRUE(s.ok()) << op << " GPU forward (kNullOp): " << s;
    for (size_t i = 0; i < out_shapes_.size(); ++i) {
      ExpectNear(gpu_out_values_[i], seven[i], 0, 0,
                 absl::StrCat(op, " forward output ", i, " (kNullOp)"));
    }
    // kWriteInplace, per offered pair.
    const int na = static_cast<int>(in_shapes_.size());
    for (auto [in_id, out_id] :
         prop_->ForwardInplaceOption(Iota(0, na), Iota(0, static_cast<int>(out_shapes_.size())))) {
      if (in_shapes_[in_id].Size() != out_shapes_[out_id].Size()) continue;
      s = GpuForward(OpReqType::kWriteTo, nan, in_id, out_id);
      ASSERT_TRUE(s.ok()) << op << " GPU forward (in place): " << s;
      ExpectNear(gpu_out_values_[out_id], cpu_out_[out_id], c_.rtol, c_.atol,
                 absl::StrCat(op, " forward output ", out_id, " in place of input ", in_id));
    }
    // Leave the kWriteTo results in the buffers for backward.
    s = GpuForward(OpReqType::kWriteTo, nan);
    ASSERT_TRUE(s.ok()) << op << " GPU forward: " << s;
  }

  // GPU backward with `req` on every input gradient, pre-filled with `prefill`; the in-place
  // variant makes in_grad `inplace_ig` alias out_grad `inplace_og`.
  absl::StatusOr<std::vector<Values>> GpuBackward(OpReqType req, const std::vector<Values>& prefill,
                                                  int inplace_og = -1, int inplace_ig = -1) {
    std::vector<Shape> og_shapes(out_shapes_.begin(), out_shapes_.begin() + nv_);
    Buffers og = Allocate(og_shapes, OutGradTypes());
    Buffers grad = Allocate(in_shapes_, in_types_);
    for (int i = 0; i < nv_; ++i) og[i]->Upload(out_grads_[i]);
    for (size_t i = 0; i < in_shapes_.size(); ++i) grad[i]->Upload(prefill[i]);
    std::vector<TBlob> og_blobs = Blobs(og), grad_blobs = Blobs(grad);
    std::vector<OpReqType> reqs(in_shapes_.size(), req);
    if (inplace_ig >= 0) {
      grad_blobs[inplace_ig] = og_blobs[inplace_og];
      reqs[inplace_ig] = OpReqType::kWriteInplace;
    }
    RETURN_IF_ERROR(gpu_op_->Backward(Ctx(true, false), og_blobs, Blobs(gpu_in_), Blobs(gpu_out_),
                                      reqs, grad_blobs, Blobs(gpu_aux_)));
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("kernel failed: ", cudaGetErrorString(cudaGetLastError())));
    }
    std::vector<Values> result;
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      result.push_back(static_cast<int>(i) == inplace_ig ? og[inplace_og]->Download()
                                                         : grad[i]->Download());
    }
    return result;
  }

  void CheckBackward() {
    const std::string& op = c_.op;
    std::vector<Values> nan, added, seven;
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      const int64_t n = in_shapes_[i].Size();
      const DType t = in_types_[i];
      // Integer buffers cannot hold NaN or fractions: a sentinel every integer type holds, and
      // whole numbers instead.
      nan.push_back(Filled(n, IsFloatingPoint(t) ? NAN : 77.0));
      added.push_back(Representable(Random(n, false, rng_), t));
      seven.push_back(Filled(n, 7.0));
    }
    absl::StatusOr<std::vector<Values>> g = GpuBackward(OpReqType::kWriteTo, nan);
    ASSERT_TRUE(g.ok()) << op << " GPU backward: " << g.status();
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      ExpectNear((*g)[i], cpu_grad_[i], c_.rtol, c_.atol,
                 absl::StrCat(op, " gradient of input ", i, " (kWriteTo)"));
    }
    g = GpuBackward(OpReqType::kAddTo, added);
    ASSERT_TRUE(g.ok()) << op << " GPU backward (kAddTo): " << g.status();
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      ExpectNear((*g)[i], Plus(added[i], cpu_grad_[i]), c_.rtol, c_.atol,
                 absl::StrCat(op, " gradient of input ", i, " (kAddTo)"));
    }
    g = GpuBackward(OpReqType::kNullOp, seven);
    ASSERT_TRUE(g.ok()) << op << " GPU backward (kNullOp): " << g.status();
    for (size_t i = 0; i < in_shapes_.size(); ++i) {
      ExpectNear((*g)[i], seven[i], 0, 0, absl::StrCat(op, " gradient of input ", i, " (kNullOp)"));
    }
    const int na = static_cast<int>(in_shapes_.size());
    const int no = static_cast<int>(out_shapes_.size());
    for (auto [og_id, ig_id] : prop_->BackwardInplaceOption(
             Iota(0, nv_), Iota(nv_, na), Iota(nv_ + na, no), Iota(nv_ + na + no, na))) {
      const int ig = ig_id - (nv_ + na + no);
      if (og_id < 0 || og_id >= nv_ || ig < 0 || ig >= na) continue;
      if (out_shapes_[og_id].Size() != in_shapes_[ig].Size()) continue;
      g = GpuBackward(OpReqType::kWriteTo, nan, og_id, ig);
      ASSERT_TRUE(g.ok()) << op << " GPU backward (in place): " << g.status();
      ExpectNear((*g)[ig], cpu_grad_[ig], c_.rtol, c_.atol,
                 absl::StrCat(op, " gradient of input ", ig, " in place of out_grad ", og_id));
    }
  }

  std::vector<DType> OutGradTypes() const {
    return std::vector<DType>(out_types_.begin(), out_types_.begin() + nv_);
  }

  GpuCase c_;
  std::mt19937_64 rng_;
  std::vector<DType> in_types_, out_types_, aux_types_;
  std::unique_ptr<OwnedRuntime> runtime_;
  std::unique_ptr<OperatorProperty> prop_;
  std::unique_ptr<Operator> cpu_op_, gpu_op_;
  std::vector<Shape> in_shapes_, out_shapes_, aux_shapes_;
  std::vector<Values> inputs_, aux_, out_grads_;
  int nv_ = 0;
  std::vector<engine::Resource> cpu_fwd_res_, gpu_fwd_res_, cpu_bwd_res_, gpu_bwd_res_;
  cudaStream_t stream_ = nullptr;
  std::vector<Values> cpu_out_, cpu_aux_, cpu_grad_;
  Buffers gpu_in_, gpu_out_, gpu_aux_;
  std::vector<Values> gpu_out_values_;
};

}  // namespace

void CheckGpuAgainstCpu(const GpuCase& c) {
  SCOPED_TRACE(c.op);
  Checker checker(c);
  checker.Run();
}

#endif  // TESSERA_USE_CUDA

}  // namespace tessera::ops::testing

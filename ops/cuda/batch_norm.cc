// BatchNorm on cuDNN (spatial mode: per channel over N and the spatial dims), matching the
// CPU operator's semantics rather than cuDNN's defaults:
//  - the `var` output is the biased batch variance, and the moving averages are
//    moving * momentum + batch * (1 - momentum) with that biased variance; cuDNN's own
//    running update uses the unbiased one, so it is switched off (null running buffers) and a
//    small kernel derives both from cuDNN's saved mean and 1/sqrt(var + eps);
//  - fix_gamma normalizes with gamma = 1 and gives gamma a zero gradient;
//  - use_global_stats (or inference) normalizes with the moving statistics, which then are
//    the mean / var outputs, and backward treats them as constants (own kernel: cuDNN's
//    backward assumes batch statistics).
// Backward recomputes 1/sqrt(var + eps) from the `var` output instead of keeping cuDNN's
// saved buffer, so the operator holds no state between calls. Gradients go through scratch
// when their reqs differ, since cuDNN has one beta for dgamma and dbeta together.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

enum { kData, kGamma, kBeta };
enum { kOut, kMean, kVar };
enum { kMovingMean, kMovingVar };

struct BnParams {
  double eps = 1e-3;
  float momentum = 0.9f;
  bool fix_gamma = true;
  bool use_global_stats = false;
  int axis = 1;
};

float* F(const TBlob& b) { return static_cast<float*>(b.dptr); }

// dst (per req) = src, n floats.
absl::Status Copy(const float* src, float* dst, int64_t n, OpReqType req, cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(LaunchMap(MapCode::kMulScalar, KernelType::kFloat32, src, nullptr, nullptr,
                                 dst, n, 1.0, static_cast<int>(req), stream));
  return absl::OkStatus();
}

class BatchNormGpuOp : public Operator {
 public:
  explicit BatchNormGpuOp(BnParams p) : p_(p) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>& aux) override {
    RETURN_IF_ERROR(CheckFloat32("BatchNorm", in));
    RETURN_IF_ERROR(CheckFloat32("BatchNorm", out));
    RETURN_IF_ERROR(CheckFloat32("BatchNorm", aux));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[kData].shape));
    const cudaStream_t stream = StreamOf(ctx);
    const int64_t c = channels_;
    const bool batch_stats = ctx.is_train && !p_.use_global_stats;
    // Scratch: [ones (fix_gamma)] [save mean] [save invstd] [y when the output is unused].
    const size_t y_bytes = batch_stats && req[kOut] == OpReqType::kNullOp ? in[kData].Bytes() : 0;
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch, ws.Get(3 * c * sizeof(float) + y_bytes));
    float* ones = static_cast<float*>(scratch);
    float* save_mean = ones + c;
    float* save_invstd = save_mean + c;
    const float* gamma = F(in[kGamma]);
    if (p_.fix_gamma) {
      CUDA_RETURN_IF_ERROR(LaunchFill(ones, c, 1.0f, stream));
      gamma = ones;
    }
    const float one = 1.0f;
    if (!batch_stats) {
      if (req[kOut] != OpReqType::kNullOp) {
        const float beta = BetaFor(req[kOut]);
        CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardInference(
            handle, CUDNN_BATCHNORM_SPATIAL, &one, &beta, x_.get(), in[kData].dptr, x_.get(),
            out[kOut].dptr, stat_.get(), gamma, in[kBeta].dptr, aux[kMovingMean].dptr,
            aux[kMovingVar].dptr, p_.eps));
      }
      RETURN_IF_ERROR(Copy(F(aux[kMovingMean]), F(out[kMean]), c, req[kMean], stream));
      return Copy(F(aux[kMovingVar]), F(out[kVar]), c, req[kVar], stream);
    }
    // Training: statistics count (moving averages) even when nobody reads the output.
    void* y = out[kOut].dptr;
    float beta = BetaFor(req[kOut]);
    if (req[kOut] == OpReqType::kNullOp) {
      y = save_invstd + c;
      beta = 0.0f;
    }
    CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardTraining(
        handle, CUDNN_BATCHNORM_SPATIAL, &one, &beta, x_.get(), in[kData].dptr, x_.get(), y,
        stat_.get(), gamma, in[kBeta].dptr, 0.0, nullptr, nullptr, p_.eps, save_mean, save_invstd));
    CUDA_RETURN_IF_ERROR(LaunchBatchNormFinish(
        save_mean, save_invstd, c, static_cast<float>(p_.eps), p_.momentum, F(out[kMean]),
        static_cast<int>(req[kMean]), F(out[kVar]), static_cast<int>(req[kVar]),
        F(aux[kMovingMean]), F(aux[kMovingVar]), stream));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    RETURN_IF_ERROR(
        CheckFloat32("BatchNorm", {out_grad[kOut], in[kData], in[kGamma], out[kMean], out[kVar]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[kData].shape));
    const cudaStream_t stream = StreamOf(ctx);
    const int64_t c = channels_;
    // Scratch: [ones] [invstd] [dgamma] [dbeta] [dx when unused].
    const size_t dx_bytes = req[kData] == OpReqType::kNullOp ? in[kData].Bytes() : 0;
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch, ws.Get(4 * c * sizeof(float) + dx_bytes));
    float* ones = static_cast<float*>(scratch);
    float* invstd = ones + c;
    float* dgamma = invstd + c;
    float* dbeta = dgamma + c;
    const float* gamma = F(in[kGamma]);
    if (p_.fix_gamma) {
      CUDA_RETURN_IF_ERROR(LaunchFill(ones, c, 1.0f, stream));
      gamma = ones;
    }
    const float eps = static_cast<float>(p_.eps);
    CUDA_RETURN_IF_ERROR(LaunchInvStd(F(out[kVar]), eps, invstd, c, stream));
    if (p_.use_global_stats) {
      const int64_t n = in[kData].shape[0];
      const int64_t inner = in[kData].Size() / (n * c);
      CUDA_RETURN_IF_ERROR(LaunchBatchNormGlobalBackward(
          F(out_grad[kOut]), F(in[kData]), gamma, F(out[kMean]), invstd, n, c, inner,
          req[kData] == OpReqType::kNullOp ? nullptr : F(in_grad[kData]),
          static_cast<int>(req[kData]), dgamma, 1, dbeta, 1, stream));
    } else {
      float* dx = req[kData] == OpReqType::kNullOp ? dbeta + c : F(in_grad[kData]);
      const float one = 1.0f, zero = 0.0f, beta_dx = BetaFor(req[kData]);
      CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationBackward(
          handle, CUDNN_BATCHNORM_SPATIAL, &one, &beta_dx, &one, &zero, x_.get(), in[kData].dptr,
          x_.get(), out_grad[kOut].dptr, x_.get(), dx, stat_.get(), gamma, dgamma, dbeta, p_.eps,
          out[kMean].dptr, invstd));
    }
    // fix_gamma: gamma is a constant 1, so its gradient is zero (written per req).
    if (p_.fix_gamma) {
      CUDA_RETURN_IF_ERROR(LaunchMap(MapCode::kMulScalar, KernelType::kFloat32, dgamma, nullptr,
                                     nullptr, F(in_grad[kGamma]), c, 0.0,
                                     static_cast<int>(req[kGamma]), stream));
    } else {
      RETURN_IF_ERROR(Copy(dgamma, F(in_grad[kGamma]), c, req[kGamma], stream));
    }
    return Copy(dbeta, F(in_grad[kBeta]), c, req[kBeta], stream);
  }

 private:
  absl::Status Prepare(const Shape& data) {
    if (data == shape_ && x_.get() != nullptr) return absl::OkStatus();
    const int axis = p_.axis < 0 ? p_.axis + data.ndim() : p_.axis;
    if (data.ndim() < 2 || axis < 0 || axis >= data.ndim()) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNorm: data ", data.ToString(),
                                                     " has no channel axis ", p_.axis));
    }
    // Any channel axis: the same memory as (outer, C, inner, 1) with channels at axis 1.
    const int64_t n = data.ProdRange(0, axis), c = data[axis],
                  inner = data.ProdRange(axis + 1, data.ndim());
    if (n > INT32_MAX || c > INT32_MAX || inner > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("BatchNorm: ", data.ToString(), " is too large for cuDNN"));
    }
    RETURN_IF_ERROR(
        SetTensorDesc(&x_, {static_cast<int>(n), static_cast<int>(c), static_cast<int>(inner), 1}));
    if (stat_.get() == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(stat_.out()));
    CUDNN_RETURN_IF_ERROR(
        cudnnDeriveBNTensorDescriptor(stat_.get(), x_.get(), CUDNN_BATCHNORM_SPATIAL));
    channels_ = c;
    shape_ = data;
    return absl::OkStatus();
  }

  BnParams p_;
  Shape shape_;
  int64_t channels_ = 0;
  TensorDesc x_, stat_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateBatchNorm(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  BnParams p;
  RETURN_IF_ERROR(r.Read("eps", &p.eps));
  RETURN_IF_ERROR(r.Read("momentum", &p.momentum));
  RETURN_IF_ERROR(r.Read("fix_gamma", &p.fix_gamma));
  RETURN_IF_ERROR(r.Read("use_global_stats", &p.use_global_stats));
  RETURN_IF_ERROR(r.Read("axis", &p.axis));
  if (p.eps < CUDNN_BN_MIN_EPSILON) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchNorm: eps ", p.eps, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON));
  }
  return std::unique_ptr<Operator>(new BatchNormGpuOp(p));
}

const bool kRegistered = [] {
  RegisterGpuOperator("BatchNorm", CreateBatchNorm);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

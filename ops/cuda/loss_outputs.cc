// The loss heads of ops/array/loss_outputs.cc on the GPU, with the CPU's formulas and
// parameters (see there): LinearRegressionOutput, LogisticRegressionOutput and
// MAERegressionOutput (grad_scale; the gradient ignores out_grad and is scaled by
// grad_scale / (label.Size() / label.shape[0])), and MakeLoss (grad_scale, normalization
// null / batch / valid, valid_thresh). float32, float64, float16 and bfloat16, computed in
// float for the half types, as on the CPU; MakeLoss's forward copies any dtype.
//
// MakeLoss with normalization='valid' counts the outputs above valid_thresh on the device
// into an 8-byte Workspace counter that the gradient kernel reads there: no host read-back.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/array_ops_util.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

enum class RegressionKind { kLinear, kLogistic, kMAE };

class RegressionOutputGpuOp : public Operator {
 public:
  RegressionOutputGpuOp(std::string name, RegressionKind kind, float grad_scale)
      : name_(std::move(name)), kind_(kind), grad_scale_(grad_scale) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(ArrayType type, FloatArrayTypeOf(name_, in[0].dtype));
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    if (kind_ != RegressionKind::kLogistic) {
      return CopyBlob(name_, in[0], out[0], req[0], StreamOf(ctx));
    }
    RETURN_IF_ERROR(CheckBlobs(name_, {&in[0], &out[0]}, in[0].dtype));
    RETURN_IF_ERROR(CheckSize(in[0], out[0]));
    CUDA_RETURN_IF_ERROR(LaunchSigmoid(type, in[0].dptr, out[0].dptr, out[0].Size(),
                                       static_cast<int>(req[0]), StreamOf(ctx)));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>&,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    const TBlob& label = in_data[1];
    const TBlob& out = out_data[0];
    const TBlob& grad = in_grad[0];
    ASSIGN_OR_RETURN(ArrayType type, FloatArrayTypeOf(name_, grad.dtype));
    if (req[0] != OpReqType::kNullOp) {
      RETURN_IF_ERROR(CheckBlobs(name_, {&grad, &label, &out}, grad.dtype));
      RETURN_IF_ERROR(CheckSize(label, grad));
      RETURN_IF_ERROR(CheckSize(out, grad));
      // The mean over the outputs of one example, in double as on the CPU.
      const int64_t per_example = label.Size() / label.shape[0];
      const double scale = grad_scale_ / static_cast<double>(per_example);
      CUDA_RETURN_IF_ERROR(LaunchRegressionGrad(type, kind_ == RegressionKind::kMAE, out.dptr,
                                                label.dptr, grad.dptr, grad.Size(), scale,
                                                static_cast<int>(req[0]), StreamOf(ctx)));
    }
    // The label is not differentiable.
    return ZeroBlob(name_, in_grad[1], req[1], StreamOf(ctx));
  }

 private:
  absl::Status CheckSize(const TBlob& a, const TBlob& b) const {
    if (a.Size() == b.Size()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(name_, ": blobs of shapes ", a.shape.ToString(),
                                            " and ", b.shape.ToString(), " differ in size"));
  }

  std::string name_;
  RegressionKind kind_;
  float grad_scale_;
};

enum class Normalization { kNull, kBatch, kValid };

class MakeLossGpuOp : public Operator {
 public:
  MakeLossGpuOp(float grad_scale, Normalization normalization, float valid_thresh)
      : grad_scale_(grad_scale), normalization_(normalization), valid_thresh_(valid_thresh) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return CopyBlob("MakeLoss", in[0], out[0], req[0], StreamOf(ctx));
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                        const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& grad = in_grad[0];
    ASSIGN_OR_RETURN(ArrayType type, FloatArrayTypeOf("MakeLoss", grad.dtype));
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckBlobs("MakeLoss", {&grad}, grad.dtype));
    const cudaStream_t stream = StreamOf(ctx);
    const int r = static_cast<int>(req[0]);
    if (normalization_ != Normalization::kValid) {
      const double norm =
          normalization_ == Normalization::kBatch ? static_cast<double>(grad.shape[0]) : 1.0;
      CUDA_RETURN_IF_ERROR(
          LaunchMakeLossGrad(type, grad.dptr, grad.Size(), grad_scale_, nullptr, norm, r, stream));
      return absl::OkStatus();
    }
    const TBlob& out = out_data[0];
    if (out.dptr == nullptr && out.Size() > 0) {
      return absl::InternalError("MakeLoss: normalization='valid' needs the output in backward");
    }
    RETURN_IF_ERROR(CheckBlobs("MakeLoss", {&out}, grad.dtype));
    using Count = unsigned long long;  // NOLINT(runtime/int): atomicAdd's 64-bit type
    Workspace workspace(ctx);
    ASSIGN_OR_RETURN(void* scratch, workspace.Get(sizeof(Count)));
    Count* count = static_cast<Count*>(scratch);
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count, 0, sizeof(Count), stream));
    CUDA_RETURN_IF_ERROR(
        LaunchCountAbove(type, out.dptr, out.Size(), valid_thresh_, count, stream));
    CUDA_RETURN_IF_ERROR(
        LaunchMakeLossGrad(type, grad.dptr, grad.Size(), grad_scale_, count, 1.0, r, stream));
    return absl::OkStatus();
  }

 private:
  float grad_scale_;
  Normalization normalization_;
  float valid_thresh_;
};

template <RegressionKind kKind>
absl::StatusOr<std::unique_ptr<Operator>> CreateRegression(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  float grad_scale = 1.0f;
  RETURN_IF_ERROR(r.Read("grad_scale", &grad_scale));
  return std::unique_ptr<Operator>(new RegressionOutputGpuOp(r.op(), kKind, grad_scale));
}

absl::StatusOr<std::unique_ptr<Operator>> CreateMakeLoss(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  float grad_scale = 1.0f, valid_thresh = 0.0f;
  RETURN_IF_ERROR(r.Read("grad_scale", &grad_scale));
  RETURN_IF_ERROR(r.Read("valid_thresh", &valid_thresh));
  const std::string normalization = r.Get("normalization", "null");
  Normalization norm;
  if (normalization == "null") {
    norm = Normalization::kNull;
  } else if (normalization == "batch") {
    norm = Normalization::kBatch;
  } else if (normalization == "valid") {
    norm = Normalization::kValid;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("MakeLoss: normalization '", normalization,
                                                   "' has no GPU kernel (null, batch, valid)"));
  }
  return std::unique_ptr<Operator>(new MakeLossGpuOp(grad_scale, norm, valid_thresh));
}

const bool kRegistered = [] {
  RegisterGpuOperator("LinearRegressionOutput", CreateRegression<RegressionKind::kLinear>);
  RegisterGpuOperator("LogisticRegressionOutput", CreateRegression<RegressionKind::kLogistic>);
  RegisterGpuOperator("MAERegressionOutput", CreateRegression<RegressionKind::kMAE>);
  RegisterGpuOperator("MakeLoss", CreateMakeLoss);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

// Activation on the GPU: relu, sigmoid and tanh on cuDNN, softrelu (no cuDNN mode) on the
// elementwise kernel, softsign (none either) on own kernels (nn_kernels.h). Backward has only
// the output (DeclareBackwardDependency of the CPU property, as MXNet), so cuDNN gets y where
// it asks for x: these three derivatives are functions of y (relu's sign of x is the sign of
// y), which is what MXNet's cuDNN path relies on too; softrelu's is 1 - exp(-y) and
// softsign's the CPU's (1 - |y|)^2. In-place (out_grad and in_grad sharing memory) is allowed
// by every kernel.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/nn_kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

class ActivationGpuOp : public Operator {
 public:
  explicit ActivationGpuOp(std::string act_type) : act_type_(std::move(act_type)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Activation", {in[0], out[0]}));
    if (act_type_ == "softrelu") {
      CUDA_RETURN_IF_ERROR(LaunchMap(MapCode::kSoftRelu, KernelType::kFloat32, in[0].dptr, nullptr,
                                     nullptr, out[0].dptr, out[0].Size(), 0,
                                     static_cast<int>(req[0]), StreamOf(ctx)));
      return absl::OkStatus();
    }
    if (act_type_ == "softsign") {
      CUDA_RETURN_IF_ERROR(LaunchSoftsign(static_cast<const float*>(in[0].dptr),
                                          static_cast<float*>(out[0].dptr), out[0].Size(),
                                          static_cast<int>(req[0]), StreamOf(ctx)));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[0].shape));
    const float one = 1.0f, beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnActivationForward(handle, act_.get(), &one, desc_.get(), in[0].dptr,
                                                 &beta, desc_.get(), out[0].dptr));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Activation", {out_grad[0], out[0], in_grad[0]}));
    if (act_type_ == "softrelu") {
      CUDA_RETURN_IF_ERROR(LaunchMap(MapCode::kSoftReluGrad, KernelType::kFloat32, out_grad[0].dptr,
                                     out[0].dptr, nullptr, in_grad[0].dptr, in_grad[0].Size(), 0,
                                     static_cast<int>(req[0]), StreamOf(ctx)));
      return absl::OkStatus();
    }
    if (act_type_ == "softsign") {
      CUDA_RETURN_IF_ERROR(LaunchSoftsignGrad(
          static_cast<const float*>(out_grad[0].dptr), static_cast<const float*>(out[0].dptr),
          static_cast<float*>(in_grad[0].dptr), in_grad[0].Size(), static_cast<int>(req[0]),
          StreamOf(ctx)));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(out[0].shape));
    const float one = 1.0f, beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnActivationBackward(
        handle, act_.get(), &one, desc_.get(), out[0].dptr, desc_.get(), out_grad[0].dptr,
        desc_.get(), out[0].dptr, &beta, desc_.get(), in_grad[0].dptr));
    return absl::OkStatus();
  }

 private:
  absl::Status Prepare(const Shape& shape) {
    if (act_.get() == nullptr) {
      cudnnActivationMode_t mode;
      if (act_type_ == "relu") {
        mode = CUDNN_ACTIVATION_RELU;
      } else if (act_type_ == "sigmoid") {
        mode = CUDNN_ACTIVATION_SIGMOID;
      } else if (act_type_ == "tanh") {
        mode = CUDNN_ACTIVATION_TANH;
      } else {
        return absl::UnimplementedError(
            absl::StrCat("Activation: act_type '", act_type_, "' has no GPU kernel"));
      }
      CUDNN_RETURN_IF_ERROR(cudnnCreateActivationDescriptor(act_.out()));
      CUDNN_RETURN_IF_ERROR(
          cudnnSetActivationDescriptor(act_.get(), mode, CUDNN_PROPAGATE_NAN, 0.0));
    }
    if (shape == shape_ && desc_.get() != nullptr) return absl::OkStatus();
    // Elementwise: any shape works as a flat (1, size, 1, 1) tensor.
    if (shape.Size() > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("Activation: ", shape.ToString(), " is too large for cuDNN"));
    }
    RETURN_IF_ERROR(SetTensorDesc(&desc_, {1, static_cast<int>(shape.Size()), 1, 1}));
    shape_ = shape;
    return absl::OkStatus();
  }

  std::string act_type_;
  Shape shape_;
  TensorDesc desc_;
  ActDesc act_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateActivation(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  return std::unique_ptr<Operator>(new ActivationGpuOp(r.Get("act_type", "relu")));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Activation", CreateActivation);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

// softmax and log_softmax on cuDNN (cudnnSoftmaxForward/Backward, accurate and log
// algorithms) along any axis: the data is viewed as (outer, axis, inner, 1) and cuDNN
// normalizes over the channel dimension. Backward reads the output only, as the CPU property
// declares.
//
// A temperature T normalizes x / T. cuDNN's alpha scales the output, not the input, so the
// forward stages x * (1 / T) in scratch memory first - the CPU's float product, rounded alike -
// while the backward needs no copy: the chain rule's factor 1 / T is exactly cuDNN's alpha
// on the gradient.
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

class SoftmaxGpuOp : public Operator {
 public:
  SoftmaxGpuOp(const char* name, int axis, bool log, double temperature)
      : name_(name),
        axis_(axis),
        log_(log),
        inverse_temperature_(static_cast<float>(1 / temperature)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32(name_, {in[0], out[0]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[0].shape));
    const float one = 1.0f, beta = BetaFor(req[0]);
    const void* x = in[0].dptr;
    Workspace ws(ctx);
    if (inverse_temperature_ != 1.0f) {
      ASSIGN_OR_RETURN(void* scaled, ws.Get(in[0].Bytes()));
      CUDA_RETURN_IF_ERROR(LaunchMap(MapCode::kMulScalar, KernelType::kFloat32, x, nullptr, nullptr,
                                     scaled, in[0].Size(), inverse_temperature_,
                                     /*req=*/1, StreamOf(ctx)));
      x = scaled;
    }
    CUDNN_RETURN_IF_ERROR(cudnnSoftmaxForward(handle, Algo(), CUDNN_SOFTMAX_MODE_CHANNEL, &one,
                                              desc_.get(), x, &beta, desc_.get(), out[0].dptr));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32(name_, {out_grad[0], out[0], in_grad[0]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(out[0].shape));
    const float beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnSoftmaxBackward(
        handle, Algo(), CUDNN_SOFTMAX_MODE_CHANNEL, &inverse_temperature_, desc_.get(), out[0].dptr,
        desc_.get(), out_grad[0].dptr, &beta, desc_.get(), in_grad[0].dptr));
    return absl::OkStatus();
  }

 private:
  cudnnSoftmaxAlgorithm_t Algo() const { return log_ ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE; }

  absl::Status Prepare(const Shape& shape) {
    if (shape == shape_ && desc_.get() != nullptr) return absl::OkStatus();
    const int axis = axis_ < 0 ? axis_ + shape.ndim() : axis_;
    if (axis < 0 || axis >= shape.ndim()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": axis ", axis_, " is out of range for ", shape.ToString()));
    }
    const int64_t outer = shape.ProdRange(0, axis);
    const int64_t inner = shape.ProdRange(axis + 1, shape.ndim());
    if (outer > INT32_MAX || shape[axis] > INT32_MAX || inner > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": ", shape.ToString(), " is too large for cuDNN"));
    }
    RETURN_IF_ERROR(SetTensorDesc(&desc_, {static_cast<int>(outer), static_cast<int>(shape[axis]),
                                           static_cast<int>(inner), 1}));
    shape_ = shape;
    return absl::OkStatus();
  }

  const char* name_;
  int axis_;
  bool log_;
  float inverse_temperature_;  // float(1 / T), the CPU's scale of the input and the gradient
  Shape shape_;
  TensorDesc desc_;
};

template <bool kLog>
absl::StatusOr<std::unique_ptr<Operator>> CreateSoftmax(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  int axis = -1;
  RETURN_IF_ERROR(r.Read("axis", &axis));
  double temperature = 1;
  RETURN_IF_ERROR(r.Read("temperature", &temperature));
  if (!(temperature > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.op(), ": temperature must be > 0, got ", temperature));
  }
  return std::unique_ptr<Operator>(
      new SoftmaxGpuOp(kLog ? "log_softmax" : "softmax", axis, kLog, temperature));
}

const bool kRegistered = [] {
  RegisterGpuOperator("softmax", CreateSoftmax<false>);
  RegisterGpuOperator("log_softmax", CreateSoftmax<true>);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

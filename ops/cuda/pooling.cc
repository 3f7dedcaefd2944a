// Pooling (2-D, NCHW) on cuDNN: max, avg (count_include_pad or not) and sum, the last as an
// average including padding scaled by the window area through cuDNN's alpha. The output
// shape is the property's; cuDNN computes the "valid" convention only, so a "full"
// convention whose shape differs is refused rather than silently cropped.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

struct PoolParams {
  Shape kernel, stride{1, 1}, pad{0, 0};
  std::string pool_type = "max";
  bool global_pool = false;
  bool count_include_pad = true;
};

class PoolingGpuOp : public Operator {
 public:
  explicit PoolingGpuOp(PoolParams p) : p_(std::move(p)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Pooling", {in[0], out[0]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[0].shape, out[0].shape));
    const float beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnPoolingForward(handle, pool_.get(), &alpha_, x_.get(), in[0].dptr,
                                              &beta, y_.get(), out[0].dptr));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Pooling", {out_grad[0], in[0], out[0], in_grad[0]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[0].shape, out[0].shape));
    const float beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(handle, pool_.get(), &alpha_, y_.get(), out[0].dptr,
                                               y_.get(), out_grad[0].dptr, x_.get(), in[0].dptr,
                                               &beta, x_.get(), in_grad[0].dptr));
    return absl::OkStatus();
  }

 private:
  // (Re)builds the descriptors when the input shape changes.
  absl::Status Prepare(const Shape& data, const Shape& out) {
    if (data == shape_ && pool_.get() != nullptr) return absl::OkStatus();
    if (data.ndim() != 4 || out.ndim() != 4) {
      return absl::UnimplementedError(absl::StrCat(
          "Pooling: the GPU kernel supports 2-D pooling (NCHW data) only, got ", data.ToString()));
    }
    int kh, kw, sh = 1, sw = 1, ph = 0, pw = 0;
    if (p_.global_pool) {
      kh = static_cast<int>(data[2]);
      kw = static_cast<int>(data[3]);
    } else {
      if (p_.kernel.ndim() != 2) {
        return absl::UnimplementedError(absl::StrCat(
            "Pooling: the GPU kernel supports 2-D kernels only, got ", p_.kernel.ToString()));
      }
      kh = static_cast<int>(p_.kernel[0]);
      kw = static_cast<int>(p_.kernel[1]);
      if (p_.stride.ndim() == 2) {
        sh = static_cast<int>(p_.stride[0]);
        sw = static_cast<int>(p_.stride[1]);
      }
      if (p_.pad.ndim() == 2) {
        ph = static_cast<int>(p_.pad[0]);
        pw = static_cast<int>(p_.pad[1]);
      }
    }
    cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
    alpha_ = 1.0f;
    if (p_.pool_type == "avg") {
      mode = p_.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    } else if (p_.pool_type == "sum") {
      mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
      alpha_ = static_cast<float>(kh) * static_cast<float>(kw);
    } else if (p_.pool_type != "max") {
      return absl::UnimplementedError(
          absl::StrCat("Pooling: pool_type '", p_.pool_type, "' has no GPU kernel"));
    }
    ASSIGN_OR_RETURN(std::vector<int> xd, IntDims("Pooling", data));
    ASSIGN_OR_RETURN(std::vector<int> yd, IntDims("Pooling", out));
    RETURN_IF_ERROR(SetTensorDesc(&x_, xd));
    RETURN_IF_ERROR(SetTensorDesc(&y_, yd));
    if (pool_.get() == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(pool_.out()));
    CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(pool_.get(), mode, CUDNN_PROPAGATE_NAN, kh,
                                                      kw, ph, pw, sh, sw));
    int n, c, h, w;
    CUDNN_RETURN_IF_ERROR(cudnnGetPooling2dForwardOutputDim(pool_.get(), x_.get(), &n, &c, &h, &w));
    if (std::vector<int>{n, c, h, w} != yd) {
      return absl::UnimplementedError(absl::StrCat(
          "Pooling: the output ", out.ToString(), " differs from cuDNN's valid-convention (", n,
          ",", c, ",", h, ",", w, "); pooling_convention='full' has no GPU kernel for it"));
    }
    shape_ = data;
    return absl::OkStatus();
  }

  PoolParams p_;
  Shape shape_;  // the input shape the descriptors describe
  TensorDesc x_, y_;
  PoolDesc pool_;
  float alpha_ = 1.0f;
};

absl::StatusOr<std::unique_ptr<Operator>> CreatePooling(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  PoolParams p;
  RETURN_IF_ERROR(r.Read("kernel", &p.kernel));
  RETURN_IF_ERROR(r.Read("stride", &p.stride));
  RETURN_IF_ERROR(r.Read("pad", &p.pad));
  RETURN_IF_ERROR(r.Read("global_pool", &p.global_pool));
  RETURN_IF_ERROR(r.Read("count_include_pad", &p.count_include_pad));
  p.pool_type = r.Get("pool_type", "max");
  return std::unique_ptr<Operator>(new PoolingGpuOp(std::move(p)));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Pooling", CreatePooling);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

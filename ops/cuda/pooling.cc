// Pooling (2-D, NCHW) on the GPU. max, avg (count_include_pad or not) and sum run on cuDNN, the
// last as an average including padding scaled by the window area through cuDNN's alpha,
// whenever cuDNN's floor ("valid") output size is the property's. Two cases run on own
// kernels (nn_kernels.h) instead: pool_type 'lp' (cuDNN has none; the CPU's double-accumulated
// loop), and pooling_convention 'full' where it rounds the output size up. cuDNN's pooling
// descriptor has only symmetric padding and its output size is the floor, so the extra
// windows 'full' adds at the end - clipped to the input, and for avg with padding divided by
// the window clipped to the padded input, as the CPU does - are computed directly. Where
// 'full' gives the same size as 'valid', the windows are identical and cuDNN runs.
#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/nn_kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

struct PoolParams {
  Shape kernel, stride, pad;  // empty: the defaults (1, 1) and (0, 0)
  std::string pool_type = "max";
  std::string convention = "valid";
  bool global_pool = false;
  bool count_include_pad = true;
  int p_value = 0;
};

// A (h, w) parameter: empty means `fallback`, as ops/nn/conv_util.h's Pair2D.
absl::StatusOr<std::array<int64_t, 2>> Pair(const Shape& value, int64_t fallback,
                                            const char* name) {
  if (value.ndim() == 0) return std::array<int64_t, 2>{fallback, fallback};
  if (value.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Pooling: parameter '", name, "' must be (h, w) for 2-D data, got ", value.ToString()));
  }
  return std::array<int64_t, 2>{value[0], value[1]};
}

class PoolingGpuOp : public Operator {
 public:
  explicit PoolingGpuOp(PoolParams p) : p_(std::move(p)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Pooling", {in[0], out[0]}));
    RETURN_IF_ERROR(Prepare(in[0].shape, out[0].shape));
    if (own_) {
      CUDA_RETURN_IF_ERROR(LaunchPoolForward(
          kind_, p_.p_value, geometry_, static_cast<const float*>(in[0].dptr),
          static_cast<float*>(out[0].dptr), static_cast<int>(req[0]), StreamOf(ctx)));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
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
    RETURN_IF_ERROR(Prepare(in[0].shape, out[0].shape));
    if (own_) {
      CUDA_RETURN_IF_ERROR(LaunchPoolBackward(
          kind_, p_.p_value, geometry_, static_cast<const float*>(out_grad[0].dptr),
          static_cast<const float*>(in[0].dptr), static_cast<const float*>(out[0].dptr),
          static_cast<float*>(in_grad[0].dptr), static_cast<int>(req[0]), StreamOf(ctx)));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    const float beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(handle, pool_.get(), &alpha_, y_.get(), out[0].dptr,
                                               y_.get(), out_grad[0].dptr, x_.get(), in[0].dptr,
                                               &beta, x_.get(), in_grad[0].dptr));
    return absl::OkStatus();
  }

 private:
  // Chooses the kernel and (re)builds its geometry or descriptors when the input shape
  // changes.
  absl::Status Prepare(const Shape& data, const Shape& out) {
    if (data == shape_ && prepared_) return absl::OkStatus();
    prepared_ = false;
    if (data.ndim() != 4 || out.ndim() != 4) {
      return absl::UnimplementedError(absl::StrCat(
          "Pooling: the GPU kernel supports 2-D pooling (NCHW data) only, got ", data.ToString()));
    }
    // The window, as ops/nn/pooling.cc's GetWindow.
    std::array<int64_t, 2> kernel{data[2], data[3]}, stride{1, 1}, pad{0, 0}, full{1, 1},
        valid{1, 1};
    if (!p_.global_pool) {
      if (p_.kernel.ndim() == 0) {
        return absl::InvalidArgumentError(
            "Pooling: parameter 'kernel' is required unless global_pool");
      }
      ASSIGN_OR_RETURN(kernel, Pair(p_.kernel, 1, "kernel"));
      ASSIGN_OR_RETURN(stride, Pair(p_.stride, 1, "stride"));
      ASSIGN_OR_RETURN(pad, Pair(p_.pad, 0, "pad"));
      for (int i = 0; i < 2; ++i) {
        const int64_t span = data[2 + i] + 2 * pad[i] - kernel[i];
        if (span < 0 || pad[i] >= kernel[i]) {
          return absl::InvalidArgumentError(
              absl::StrCat("Pooling: kernel ", p_.kernel.ToString(), " and pad ", p_.pad.ToString(),
                           " do not fit argument 'data' ", data.ToString()));
        }
        valid[i] = 1 + span / stride[i];
        full[i] = 1 + (span + stride[i] - 1) / stride[i];
      }
    }
    const std::array<int64_t, 2> expected = p_.convention == "full" ? full : valid;
    if (out[0] != data[0] || out[1] != data[1] || out[2] != expected[0] || out[3] != expected[1]) {
      return absl::InternalError(absl::StrCat("Pooling: the output ", out.ToString(),
                                              " is not the one the window gives for ",
                                              data.ToString()));
    }
    own_ = p_.pool_type == "lp" || expected != valid;
    if (own_) {
      if (p_.pool_type == "max") {
        kind_ = PoolKind::kMax;
      } else if (p_.pool_type == "avg") {
        kind_ = p_.count_include_pad ? PoolKind::kAvgIncludePad : PoolKind::kAvgExcludePad;
      } else if (p_.pool_type == "sum") {
        kind_ = PoolKind::kSum;
      } else {
        kind_ = PoolKind::kLp;
      }
      geometry_ = PoolGeometry{data[0] * data[1], data[2],   data[3],   out[2], out[3], kernel[0],
                               kernel[1],         stride[0], stride[1], pad[0], pad[1]};
    } else {
      RETURN_IF_ERROR(PrepareCudnn(data, out, kernel, stride, pad));
    }
    shape_ = data;
    prepared_ = true;
    return absl::OkStatus();
  }

  absl::Status PrepareCudnn(const Shape& data, const Shape& out,
                            const std::array<int64_t, 2>& kernel,
                            const std::array<int64_t, 2>& stride,
                            const std::array<int64_t, 2>& pad) {
    cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
    alpha_ = 1.0f;
    if (p_.pool_type == "avg") {
      mode = p_.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    } else if (p_.pool_type == "sum") {
      mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
      alpha_ = static_cast<float>(kernel[0]) * static_cast<float>(kernel[1]);
    }
    ASSIGN_OR_RETURN(std::vector<int> xd, IntDims("Pooling", data));
    ASSIGN_OR_RETURN(std::vector<int> yd, IntDims("Pooling", out));
    ASSIGN_OR_RETURN(
        std::vector<int> window,
        IntDims("Pooling", Shape{kernel[0], kernel[1], stride[0], stride[1], pad[0], pad[1]}));
    RETURN_IF_ERROR(SetTensorDesc(&x_, xd));
    RETURN_IF_ERROR(SetTensorDesc(&y_, yd));
    if (pool_.get() == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(pool_.out()));
    CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(pool_.get(), mode, CUDNN_PROPAGATE_NAN,
                                                      window[0], window[1], window[4], window[5],
                                                      window[2], window[3]));
    int n, c, h, w;
    CUDNN_RETURN_IF_ERROR(cudnnGetPooling2dForwardOutputDim(pool_.get(), x_.get(), &n, &c, &h, &w));
    if (std::vector<int>{n, c, h, w} != yd) {
      return absl::InternalError(absl::StrCat("Pooling: cuDNN computes output (", n, ",", c, ",", h,
                                              ",", w, "), the property inferred ", out.ToString()));
    }
    return absl::OkStatus();
  }

  const PoolParams p_;
  Shape shape_;  // the input shape the kernel choice and descriptors are for
  bool prepared_ = false;
  bool own_ = false;  // own kernels (lp, or 'full' beyond cuDNN's size) instead of cuDNN
  PoolKind kind_ = PoolKind::kMax;
  PoolGeometry geometry_;
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
  RETURN_IF_ERROR(r.Read("p_value", &p.p_value));
  p.pool_type = r.Get("pool_type", "max");
  p.convention = r.Get("pooling_convention", "valid");
  if (p.pool_type != "max" && p.pool_type != "avg" && p.pool_type != "sum" && p.pool_type != "lp") {
    return absl::InvalidArgumentError(
        absl::StrCat("Pooling: pool_type '", p.pool_type, "' has no GPU kernel"));
  }
  if (p.convention != "valid" && p.convention != "full") {
    return absl::InvalidArgumentError(
        absl::StrCat("Pooling: pooling_convention '", p.convention, "' has no GPU kernel"));
  }
  if (p.pool_type == "lp" && p.p_value < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pooling: pool_type 'lp' needs p_value >= 1, got ", r.Get("p_value", "None")));
  }
  return std::unique_ptr<Operator>(new PoolingGpuOp(std::move(p)));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Pooling", CreatePooling);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

// SoftmaxOutput on the GPU: the forward softmax on cuDNN (as ops/cuda/softmax.cc) over the
// class axis the CPU operator uses - the last axis with preserve_shape, axis 1 of (N, C, ...)
// with multi_output, else all of the data after axis 0 - viewed as (outer, classes, inner, 1)
// in cuDNN's channel mode. Backward is the CPU's loss gradient on own kernels
// (nn_kernels.h), ignoring out_grad: (softmax - smoothed one-hot(label)) * grad_scale /
// normalizer, zero where an ignored label sits. The 'valid' normalizer (the count of labels
// != ignore_label) is counted on the device by one kernel and read there by the next, so the
// host never waits for it.
//
// Float32 only, as the CPU operator. The one behaviour that differs: a label outside
// [0, classes) that is not ignored is an error on the CPU, which a kernel cannot report
// without a host read-back, so the GPU writes NaN into that position's gradient instead.
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
#include "ops/cuda/nn_kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

enum { kData, kLabel };
enum class Normalization { kNull, kBatch, kValid };

struct SoftmaxOutputParams {
  float grad_scale = 1.0f;
  float ignore_label = -1.0f;
  bool multi_output = false;
  bool use_ignore = false;
  bool preserve_shape = false;
  Normalization normalization = Normalization::kNull;
  float smooth_alpha = 0.0f;
};

struct View {
  int64_t outer, classes, inner;
};

// ops/nn/softmax_output.cc's View.
View ViewOf(const SoftmaxOutputParams& p, const Shape& data) {
  if (p.preserve_shape) return {data.ProdRange(0, data.ndim() - 1), data[data.ndim() - 1], 1};
  if (p.multi_output) {
    return {data[0], data.ndim() > 1 ? data[1] : 1, data.ProdRange(2, data.ndim())};
  }
  return {data[0], data.ProdRange(1, data.ndim()), 1};
}

class SoftmaxOutputGpuOp : public Operator {
 public:
  explicit SoftmaxOutputGpuOp(SoftmaxOutputParams p) : p_(p) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("SoftmaxOutput", {in[kData], out[0]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    RETURN_IF_ERROR(Prepare(in[kData].shape));
    const float one = 1.0f, beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnSoftmaxForward(handle, CUDNN_SOFTMAX_ACCURATE,
                                              CUDNN_SOFTMAX_MODE_CHANNEL, &one, desc_.get(),
                                              in[kData].dptr, &beta, desc_.get(), out[0].dptr));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>&,
                        const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    RETURN_IF_ERROR(CheckFloat32("SoftmaxOutput", {in[kLabel], out[0]}));
    const cudaStream_t stream = StreamOf(ctx);
    const View v = ViewOf(p_, out[0].shape);
    const int64_t num_labels = v.outer * v.inner;
    if (req[kData] != OpReqType::kNullOp) {
      RETURN_IF_ERROR(CheckFloat32("SoftmaxOutput", {in_grad[kData]}));
      SoftmaxOutputGradArgs args;
      args.outer = v.outer;
      args.classes = v.classes;
      args.inner = v.inner;
      args.grad_scale = p_.grad_scale;
      args.use_ignore = p_.use_ignore;
      args.ignore_label = p_.ignore_label;
      args.on_target = 1.0f - p_.smooth_alpha;
      args.off_target = v.classes > 1 ? p_.smooth_alpha / static_cast<float>(v.classes - 1) : 0.0f;
      double normalizer = 1;
      if (p_.normalization == Normalization::kBatch) {
        normalizer = static_cast<double>(out[0].shape[0]);
      }
      args.scale = static_cast<float>(p_.grad_scale / normalizer);
      // Outlives the launches below: freed (stream-ordered) when it goes out of scope.
      Workspace ws(ctx);
      if (p_.normalization == Normalization::kValid) {
        ASSIGN_OR_RETURN(void* count, ws.Get(sizeof(unsigned long long)));
        args.valid_count = static_cast<unsigned long long*>(count);
        // The CPU counts labels != ignore_label whether or not use_ignore is set.
        CUDA_RETURN_IF_ERROR(LaunchCountNotEqual(static_cast<const float*>(in[kLabel].dptr),
                                                 num_labels, p_.ignore_label,
                                                 static_cast<unsigned long long*>(count), stream));
      }
      CUDA_RETURN_IF_ERROR(LaunchSoftmaxOutputGrad(
          args, static_cast<const float*>(out[0].dptr), static_cast<const float*>(in[kLabel].dptr),
          static_cast<float*>(in_grad[kData].dptr), static_cast<int>(req[kData]), stream));
    }
    // Labels are constants: their gradient is zero (adding zero leaves kAddTo as it is).
    if (req[kLabel] == OpReqType::kWriteTo || req[kLabel] == OpReqType::kWriteInplace) {
      RETURN_IF_ERROR(CheckFloat32("SoftmaxOutput", {in_grad[kLabel]}));
      CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(in_grad[kLabel].dptr, 0, in_grad[kLabel].Bytes(), stream));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Prepare(const Shape& shape) {
    if (shape == shape_ && desc_.get() != nullptr) return absl::OkStatus();
    const View v = ViewOf(p_, shape);
    if (v.outer > INT32_MAX || v.classes > INT32_MAX || v.inner > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("SoftmaxOutput: ", shape.ToString(), " is too large for cuDNN"));
    }
    RETURN_IF_ERROR(SetTensorDesc(&desc_, {static_cast<int>(v.outer), static_cast<int>(v.classes),
                                           static_cast<int>(v.inner), 1}));
    shape_ = shape;
    return absl::OkStatus();
  }

  const SoftmaxOutputParams p_;
  Shape shape_;  // the data shape desc_ describes
  TensorDesc desc_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateSoftmaxOutput(const OperatorProperty& prop,
                                                              Context) {
  ParamReader r(prop);
  SoftmaxOutputParams p;
  RETURN_IF_ERROR(r.Read("grad_scale", &p.grad_scale));
  RETURN_IF_ERROR(r.Read("ignore_label", &p.ignore_label));
  RETURN_IF_ERROR(r.Read("multi_output", &p.multi_output));
  RETURN_IF_ERROR(r.Read("use_ignore", &p.use_ignore));
  RETURN_IF_ERROR(r.Read("preserve_shape", &p.preserve_shape));
  RETURN_IF_ERROR(r.Read("smooth_alpha", &p.smooth_alpha));
  const std::string normalization = r.Get("normalization", "null");
  if (normalization == "null") {
    p.normalization = Normalization::kNull;
  } else if (normalization == "batch") {
    p.normalization = Normalization::kBatch;
  } else if (normalization == "valid") {
    p.normalization = Normalization::kValid;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("SoftmaxOutput: parameter normalization='",
                                                   normalization,
                                                   "' is not one of 'null', 'batch', 'valid'"));
  }
  return std::unique_ptr<Operator>(new SoftmaxOutputGpuOp(p));
}

const bool kRegistered = [] {
  RegisterGpuOperator("SoftmaxOutput", CreateSoftmaxOutput);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

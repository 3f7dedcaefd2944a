// Deconvolution (2-D transposed convolution, NCHW, groups, dilation, adj, target_shape) on
// cuDNN. A deconvolution is the transpose of the convolution that maps its output y
// (N, num_filter, OH, OW) to its input x (N, C, H, W) with MXNet's weight (C, num_filter /
// num_group, kh, kw) as cuDNN's filter (K = C, num_filter / num_group, kh, kw). So forward is
// cudnnConvolutionBackwardData, backward data is cudnnConvolutionForward, the weight gradient
// is cudnnConvolutionBackwardFilter with the deconvolution's out_grad as cuDNN's x and its
// data as cuDNN's dy, and the bias is added and reduced over y as in ops/cuda/convolution.cc.
//
// Padding. The CPU pads pad on the left and pad - adj on the right of each output dimension.
// cuDNN's padding is symmetric, but a convolution over OH = (H - 1) * stride + dilated
// kernel - 2 * pad + adj rows with padding pad still yields H windows whenever adj < stride,
// and the adj rows at the end are exactly the right padding it does not use. adj >= stride
// only arises from target_shape at stride 1 (an odd excess: adj 1); there the convolution
// runs over y with e = adj - stride + 1 rows prepended and padding pad - e, which gives the
// same windows: the forward writes that larger y into scratch and copies its last OH rows
// out, the backward zero-pads out_grad into it (the prepended rows are not outputs, so their
// gradient is zero).
//
// Algorithms and workspace as ops/cuda/convolution.cc: measured or ranked as `cudnn_tune` says,
// once per data shape, within the `workspace` limit (MB), under the TF32 policy; scratch from
// the temp-space resource. Float32 only, as the CPU operator.
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_algorithm.h"
#include "ops/cuda/cudnn_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/nn_kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

enum { kData, kWeight, kBias };

using Pair = std::array<int64_t, 2>;

struct DeconvParams {
  Shape kernel, stride, dilate, pad, adj, target_shape;  // empty: MXNet's defaults
  int num_filter = 0;
  int num_group = 1;
  bool no_bias = true;  // MXNet's default for Deconvolution
  int64_t workspace_mb = 512;
  CudnnTune tune = CudnnTune::kLimitedWorkspace;
};

// A (h, w) parameter: empty means `fallback`, as ops/nn/conv_util.h's Pair2D.
absl::StatusOr<Pair> PairOf(const Shape& value, int64_t fallback, const char* name) {
  if (value.ndim() == 0) return Pair{fallback, fallback};
  if (value.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("Deconvolution: parameter '", name,
                                                   "' must be (h, w) for 2-D data, got ",
                                                   value.ToString()));
  }
  return Pair{value[0], value[1]};
}

constexpr size_t kAlign = 256;
size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Descriptors, algorithms and geometry for one data shape. cuDNN's names: the convolution's
// x is the deconvolution's output (y_ext: y with the prepended rows / columns), its y the
// deconvolution's data.
struct Plan {
  TensorDesc data, y_ext, y, bias;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionBwdDataAlgoPerf_t fwd;  // the deconvolution's forward
  cudnnConvolutionFwdAlgoPerf_t bwd_data;
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter;
  int64_t planes = 0, out_h = 0, out_w = 0;  // y is (planes, out_h, out_w)
  Pair ext{0, 0};                            // rows / columns prepended in y_ext
  size_t ext_bytes = 0;                      // scratch for y_ext (0: y_ext is y)
};

class DeconvolutionGpuOp : public Operator {
 public:
  DeconvolutionGpuOp(DeconvParams p, Pair kernel, Pair stride, Pair dilate, Pair pad, Pair adj)
      : p_(std::move(p)), kernel_(kernel), stride_(stride), dilate_(dilate), pad_(pad), adj_(adj) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Deconvolution", in));
    RETURN_IF_ERROR(CheckFloat32("Deconvolution", out));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    ASSIGN_OR_RETURN(Plan * plan,
                     GetPlan(handle, in[kData].shape, in[kWeight].shape, out[0].shape));
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch, ws.Get(Aligned(plan->ext_bytes) + plan->fwd.memory));
    const bool extended = plan->ext_bytes > 0;
    void* algo_scratch = static_cast<char*>(scratch) + Aligned(plan->ext_bytes);
    // Extended: the whole y_ext is written to scratch, then the output part copied per req.
    void* target = extended ? scratch : out[0].dptr;
    const float one = 1.0f, beta = extended ? 0.0f : BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv.get(), plan->fwd.mathType));
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        handle, &one, plan->w.get(), in[kWeight].dptr, plan->data.get(), in[kData].dptr,
        plan->conv.get(), plan->fwd.algo, algo_scratch, plan->fwd.memory, &beta, plan->y_ext.get(),
        target));
    if (extended) {
      CUDA_RETURN_IF_ERROR(LaunchCropPlanes(static_cast<const float*>(scratch),
                                            static_cast<float*>(out[0].dptr), plan->planes,
                                            plan->out_h, plan->out_w, plan->ext[0], plan->ext[1],
                                            static_cast<int>(req[0]), StreamOf(ctx)));
    }
    if (!p_.no_bias) {
      CUDNN_RETURN_IF_ERROR(cudnnAddTensor(handle, &one, plan->bias.get(), in[kBias].dptr, &one,
                                           plan->y.get(), out[0].dptr));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    RETURN_IF_ERROR(CheckFloat32("Deconvolution", {out_grad[0], in[kData], in[kWeight]}));
    RETURN_IF_ERROR(CheckFloat32("Deconvolution", in_grad));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    ASSIGN_OR_RETURN(Plan * plan,
                     GetPlan(handle, in[kData].shape, in[kWeight].shape, out_grad[0].shape));
    const bool need_data = req[kData] != OpReqType::kNullOp;
    const bool need_weight = req[kWeight] != OpReqType::kNullOp;
    const size_t algo_bytes =
        std::max(need_data ? plan->bwd_data.memory : 0, need_weight ? plan->bwd_filter.memory : 0);
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch, ws.Get(Aligned(plan->ext_bytes) + algo_bytes));
    void* algo_scratch = static_cast<char*>(scratch) + Aligned(plan->ext_bytes);
    const void* dy_ext = out_grad[0].dptr;
    if (plan->ext_bytes > 0 && (need_data || need_weight)) {
      CUDA_RETURN_IF_ERROR(LaunchZeroPadPlanes(
          static_cast<const float*>(out_grad[0].dptr), static_cast<float*>(scratch), plan->planes,
          plan->out_h, plan->out_w, plan->ext[0], plan->ext[1], StreamOf(ctx)));
      dy_ext = scratch;
    }
    const float one = 1.0f;
    if (!p_.no_bias && req[kBias] != OpReqType::kNullOp) {
      const float beta = BetaFor(req[kBias]);
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardBias(handle, &one, plan->y.get(),
                                                         out_grad[0].dptr, &beta, plan->bias.get(),
                                                         in_grad[kBias].dptr));
    }
    if (need_weight) {
      const float beta = BetaFor(req[kWeight]);
      CUDNN_RETURN_IF_ERROR(
          cudnnSetConvolutionMathType(plan->conv.get(), plan->bwd_filter.mathType));
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
          handle, &one, plan->y_ext.get(), dy_ext, plan->data.get(), in[kData].dptr,
          plan->conv.get(), plan->bwd_filter.algo, algo_scratch, plan->bwd_filter.memory, &beta,
          plan->w.get(), in_grad[kWeight].dptr));
    }
    if (need_data) {
      const float beta = BetaFor(req[kData]);
      CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv.get(), plan->bwd_data.mathType));
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
          handle, &one, plan->y_ext.get(), dy_ext, plan->w.get(), in[kWeight].dptr,
          plan->conv.get(), plan->bwd_data.algo, algo_scratch, plan->bwd_data.memory, &beta,
          plan->data.get(), in_grad[kData].dptr));
    }
    return absl::OkStatus();
  }

 private:
  // pad and adj for a data shape: the parameters, or with target_shape MXNet's InferPad as
  // ops/nn/deconvolution.cc's GeometryFor.
  absl::Status PadFor(const Shape& data, Pair* pad, Pair* adj) const {
    *pad = pad_;
    *adj = adj_;
    bool has_target = false;
    for (int64_t t : p_.target_shape) has_target = has_target || t != 0;
    if (!has_target) return absl::OkStatus();
    for (int i = 0; i < 2; ++i) {
      const int64_t full = (data[2 + i] - 1) * stride_[i] + dilate_[i] * (kernel_[i] - 1) + 1;
      const int64_t target = p_.target_shape[i];
      if (full < target) {
        return absl::InvalidArgumentError(
            absl::StrCat("Deconvolution: target_shape ", p_.target_shape.ToString(),
                         " is larger than argument 'data' ", data.ToString(), " can give"));
      }
      (*adj)[i] = (full - target) % 2;
      (*pad)[i] = (full - target + 1) / 2;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Plan*> GetPlan(cudnnHandle_t handle, const Shape& data, const Shape& weight,
                                const Shape& out) {
    std::vector<int64_t> key(data.begin(), data.end());
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    if (data.ndim() != 4 || weight.ndim() != 4 || out.ndim() != 4) {
      return absl::UnimplementedError(absl::StrCat(
          "Deconvolution: the GPU kernel supports 2-D deconvolution (NCHW data) only, got data ",
          data.ToString(), " and weight ", weight.ToString()));
    }
    Pair pad, adj;
    RETURN_IF_ERROR(PadFor(data, &pad, &adj));
    auto plan = std::make_unique<Plan>();
    Pair conv_pad;
    for (int i = 0; i < 2; ++i) {
      const int64_t full = (data[2 + i] - 1) * stride_[i] + dilate_[i] * (kernel_[i] - 1) + 1;
      const int64_t length = full - 2 * pad[i] + adj[i];
      if (out[2 + i] != length) {
        return absl::InternalError(absl::StrCat("Deconvolution: the output ", out.ToString(),
                                                " is not the one data ", data.ToString(),
                                                " gives"));
      }
      // See the file comment: rows prepended so that the symmetric padding fits.
      plan->ext[i] = std::max<int64_t>(0, adj[i] - stride_[i] + 1);
      conv_pad[i] = pad[i] - plan->ext[i];
      if (conv_pad[i] < 0) {
        return absl::UnimplementedError(absl::StrCat("Deconvolution: pad ", pad[i], " with adj ",
                                                     adj[i], " and stride ", stride_[i],
                                                     " has no cuDNN equivalent"));
      }
    }
    plan->planes = out[0] * out[1];
    plan->out_h = out[2];
    plan->out_w = out[3];
    const Shape ext_shape{out[0], out[1], out[2] + plan->ext[0], out[3] + plan->ext[1]};
    if (plan->ext[0] > 0 || plan->ext[1] > 0) {
      plan->ext_bytes = static_cast<size_t>(ext_shape.Size()) * sizeof(float);
    }
    ASSIGN_OR_RETURN(std::vector<int> xd, IntDims("Deconvolution", data));
    ASSIGN_OR_RETURN(std::vector<int> wd, IntDims("Deconvolution", weight));
    ASSIGN_OR_RETURN(std::vector<int> yd, IntDims("Deconvolution", out));
    ASSIGN_OR_RETURN(std::vector<int> ed, IntDims("Deconvolution", ext_shape));
    ASSIGN_OR_RETURN(std::vector<int> window,
                     IntDims("Deconvolution", Shape{conv_pad[0], conv_pad[1], stride_[0],
                                                    stride_[1], dilate_[0], dilate_[1]}));
    RETURN_IF_ERROR(SetTensorDesc(&plan->data, xd));
    RETURN_IF_ERROR(SetTensorDesc(&plan->y, yd));
    RETURN_IF_ERROR(SetTensorDesc(&plan->y_ext, ed));
    RETURN_IF_ERROR(SetTensorDesc(&plan->bias, {1, p_.num_filter, 1, 1}));
    CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(plan->w.out()));
    CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        plan->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, wd[0], wd[1], wd[2], wd[3]));
    CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(plan->conv.out()));
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
        plan->conv.get(), window[0], window[1], window[2], window[3], window[4], window[5],
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(plan->conv.get(), p_.num_group));
    // The convolution over y_ext must give back the data's shape, or the padding is wrong.
    int n, c, h, w;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(plan->conv.get(), plan->y_ext.get(),
                                                                plan->w.get(), &n, &c, &h, &w));
    if (std::vector<int>{n, c, h, w} != xd) {
      return absl::InternalError(absl::StrCat("Deconvolution: cuDNN's convolution over ",
                                              ext_shape.ToString(), " gives (", n, ",", c, ",", h,
                                              ",", w, "), not the data ", data.ToString()));
    }
    // The convolution over y_ext gives the data: its backward-data is this forward.
    ASSIGN_OR_RETURN(ConvAlgorithms algos,
                     ChooseConvAlgorithms("Deconvolution", handle, plan->y_ext.get(), plan->w.get(),
                                          plan->conv.get(), plan->data.get(), p_.tune,
                                          static_cast<size_t>(p_.workspace_mb) << 20));
    plan->fwd = algos.bwd_data;
    plan->bwd_data = algos.fwd;
    plan->bwd_filter = algos.bwd_filter;
    Plan* raw = plan.get();
    plans_.emplace(std::move(key), std::move(plan));
    return raw;
  }

  const DeconvParams p_;
  const Pair kernel_, stride_, dilate_, pad_, adj_;
  // Per data shape; the engine runs one call of an Operator at a time, so no lock.
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateDeconvolution(const OperatorProperty& prop,
                                                              Context) {
  ParamReader r(prop);
  DeconvParams p;
  RETURN_IF_ERROR(r.Read("kernel", &p.kernel));
  RETURN_IF_ERROR(r.Read("stride", &p.stride));
  RETURN_IF_ERROR(r.Read("dilate", &p.dilate));
  RETURN_IF_ERROR(r.Read("pad", &p.pad));
  RETURN_IF_ERROR(r.Read("adj", &p.adj));
  RETURN_IF_ERROR(r.Read("target_shape", &p.target_shape));
  RETURN_IF_ERROR(r.Read("num_filter", &p.num_filter));
  RETURN_IF_ERROR(r.Read("num_group", &p.num_group));
  RETURN_IF_ERROR(r.Read("no_bias", &p.no_bias));
  RETURN_IF_ERROR(r.Read("workspace", &p.workspace_mb));
  ASSIGN_OR_RETURN(p.tune, ParseCudnnTune("Deconvolution", r.Get("cudnn_tune")));
  // layout: the property's schema has refused all but NCHW.
  if (p.kernel.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Deconvolution: parameter 'kernel' must be (h, w), got ", p.kernel.ToString()));
  }
  ASSIGN_OR_RETURN(Pair kernel, PairOf(p.kernel, 1, "kernel"));
  ASSIGN_OR_RETURN(Pair stride, PairOf(p.stride, 1, "stride"));
  ASSIGN_OR_RETURN(Pair dilate, PairOf(p.dilate, 1, "dilate"));
  ASSIGN_OR_RETURN(Pair pad, PairOf(p.pad, 0, "pad"));
  ASSIGN_OR_RETURN(Pair adj, PairOf(p.adj, 0, "adj"));
  bool has_target = false;
  for (int64_t t : p.target_shape) has_target = has_target || t != 0;
  if (has_target) {
    if (p.target_shape.ndim() != 2 || p.target_shape[0] == 0 || p.target_shape[1] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Deconvolution: parameter 'target_shape' must be positive (h, w), got ",
                       p.target_shape.ToString()));
    }
  } else {
    for (int i = 0; i < 2; ++i) {
      if (adj[i] >= stride[i]) {
        return absl::InvalidArgumentError(absl::StrCat("Deconvolution: adj ", p.adj.ToString(),
                                                       " must be smaller than stride ",
                                                       p.stride.ToString()));
      }
    }
  }
  return std::unique_ptr<Operator>(
      new DeconvolutionGpuOp(std::move(p), kernel, stride, dilate, pad, adj));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Deconvolution", CreateDeconvolution);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

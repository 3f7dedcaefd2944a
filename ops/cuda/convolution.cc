// Convolution (2-D, NCHW, groups, dilation) on cuDNN: forward, backward data / filter / bias.
//
// Algorithms are measured or ranked by cuDNN as `cudnn_tune` says (cudnn_algorithm.h), once per
// input shape and cached in the operator, chosen within the `workspace` limit (MB, as MXNet)
// under the TF32 policy. Scratch comes from the temp-space resource; kAddTo is cuDNN's
// beta = 1.
#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_algorithm.h"
#include "ops/cuda/cudnn_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

enum { kData, kWeight, kBias };

struct ConvParams {
  Shape kernel, stride{1, 1}, dilate{1, 1}, pad{0, 0};
  int num_filter = 0;
  int num_group = 1;
  bool no_bias = false;
  int64_t workspace_mb = 1024;
  CudnnTune tune = CudnnTune::kLimitedWorkspace;
};

// Descriptors and algorithms for one input shape.
struct Plan {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgoPerf_t fwd;
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data;
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter;
};

class ConvolutionGpuOp : public Operator {
 public:
  explicit ConvolutionGpuOp(ConvParams p) : p_(std::move(p)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("Convolution", in));
    RETURN_IF_ERROR(CheckFloat32("Convolution", out));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    ASSIGN_OR_RETURN(Plan * plan,
                     GetPlan(handle, in[kData].shape, in[kWeight].shape, out[0].shape));
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch, ws.Get(plan->fwd.memory));
    const float one = 1.0f, beta = BetaFor(req[0]);
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv.get(), plan->fwd.mathType));
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(handle, &one, plan->x.get(), in[kData].dptr,
                                                  plan->w.get(), in[kWeight].dptr, plan->conv.get(),
                                                  plan->fwd.algo, scratch, plan->fwd.memory, &beta,
                                                  plan->y.get(), out[0].dptr));
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
    RETURN_IF_ERROR(CheckFloat32("Convolution", {out_grad[0], in[kData], in[kWeight]}));
    ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(ctx));
    ASSIGN_OR_RETURN(Plan * plan,
                     GetPlan(handle, in[kData].shape, in[kWeight].shape, out_grad[0].shape));
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch,
                     ws.Get(std::max(plan->bwd_data.memory, plan->bwd_filter.memory)));
    const float one = 1.0f;
    if (!p_.no_bias && req[kBias] != OpReqType::kNullOp) {
      const float beta = BetaFor(req[kBias]);
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardBias(handle, &one, plan->y.get(),
                                                         out_grad[0].dptr, &beta, plan->bias.get(),
                                                         in_grad[kBias].dptr));
    }
    if (req[kWeight] != OpReqType::kNullOp) {
      const float beta = BetaFor(req[kWeight]);
      CUDNN_RETURN_IF_ERROR(
          cudnnSetConvolutionMathType(plan->conv.get(), plan->bwd_filter.mathType));
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
          handle, &one, plan->x.get(), in[kData].dptr, plan->y.get(), out_grad[0].dptr,
          plan->conv.get(), plan->bwd_filter.algo, scratch, plan->bwd_filter.memory, &beta,
          plan->w.get(), in_grad[kWeight].dptr));
    }
    if (req[kData] != OpReqType::kNullOp) {
      const float beta = BetaFor(req[kData]);
      CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv.get(), plan->bwd_data.mathType));
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
          handle, &one, plan->w.get(), in[kWeight].dptr, plan->y.get(), out_grad[0].dptr,
          plan->conv.get(), plan->bwd_data.algo, scratch, plan->bwd_data.memory, &beta,
          plan->x.get(), in_grad[kData].dptr));
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Plan*> GetPlan(cudnnHandle_t handle, const Shape& data, const Shape& weight,
                                const Shape& out) {
    std::vector<int64_t> key(data.begin(), data.end());
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    if (data.ndim() != 4 || weight.ndim() != 4 || out.ndim() != 4 || p_.kernel.ndim() != 2) {
      return absl::UnimplementedError(absl::StrCat(
          "Convolution: the GPU kernel supports 2-D convolution (NCHW data) only, got data ",
          data.ToString(), " and kernel ", p_.kernel.ToString()));
    }
    auto plan = std::make_unique<Plan>();
    ASSIGN_OR_RETURN(std::vector<int> xd, IntDims("Convolution", data));
    ASSIGN_OR_RETURN(std::vector<int> wd, IntDims("Convolution", weight));
    ASSIGN_OR_RETURN(std::vector<int> yd, IntDims("Convolution", out));
    RETURN_IF_ERROR(SetTensorDesc(&plan->x, xd));
    RETURN_IF_ERROR(SetTensorDesc(&plan->y, yd));
    RETURN_IF_ERROR(SetTensorDesc(&plan->bias, {1, p_.num_filter, 1, 1}));
    CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(plan->w.out()));
    CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        plan->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, wd[0], wd[1], wd[2], wd[3]));
    CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(plan->conv.out()));
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
        plan->conv.get(), static_cast<int>(p_.pad[0]), static_cast<int>(p_.pad[1]),
        static_cast<int>(p_.stride[0]), static_cast<int>(p_.stride[1]),
        static_cast<int>(p_.dilate[0]), static_cast<int>(p_.dilate[1]), CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(plan->conv.get(), p_.num_group));
    // The output shape the property inferred must be cuDNN's, or the two disagree on padding.
    int n, c, h, w;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(plan->conv.get(), plan->x.get(),
                                                                plan->w.get(), &n, &c, &h, &w));
    if (std::vector<int>{n, c, h, w} != yd) {
      return absl::InternalError(absl::StrCat("Convolution: cuDNN computes output (", n, ",", c,
                                              ",", h, ",", w, "), the property inferred ",
                                              out.ToString()));
    }
    ASSIGN_OR_RETURN(ConvAlgorithms algos,
                     ChooseConvAlgorithms("Convolution", handle, plan->x.get(), plan->w.get(),
                                          plan->conv.get(), plan->y.get(), p_.tune,
                                          static_cast<size_t>(p_.workspace_mb) << 20));
    plan->fwd = algos.fwd;
    plan->bwd_data = algos.bwd_data;
    plan->bwd_filter = algos.bwd_filter;
    Plan* raw = plan.get();
    plans_.emplace(std::move(key), std::move(plan));
    return raw;
  }

  ConvParams p_;
  // Per input shape; the engine runs one call of an Operator at a time, so no lock.
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateConvolution(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  ConvParams p;
  RETURN_IF_ERROR(r.Read("kernel", &p.kernel));
  RETURN_IF_ERROR(r.Read("stride", &p.stride));
  RETURN_IF_ERROR(r.Read("dilate", &p.dilate));
  RETURN_IF_ERROR(r.Read("pad", &p.pad));
  RETURN_IF_ERROR(r.Read("num_filter", &p.num_filter));
  RETURN_IF_ERROR(r.Read("num_group", &p.num_group));
  RETURN_IF_ERROR(r.Read("no_bias", &p.no_bias));
  RETURN_IF_ERROR(r.Read("workspace", &p.workspace_mb));
  ASSIGN_OR_RETURN(p.tune, ParseCudnnTune("Convolution", r.Get("cudnn_tune")));
  if (p.kernel.ndim() != 2 || p.stride.ndim() != 2 || p.dilate.ndim() != 2 || p.pad.ndim() != 2) {
    return absl::UnimplementedError(
        absl::StrCat("Convolution: the GPU kernel supports 2-D kernels only, got kernel ",
                     p.kernel.ToString(), " stride ", p.stride.ToString(), " dilate ",
                     p.dilate.ToString(), " pad ", p.pad.ToString()));
  }
  return std::unique_ptr<Operator>(new ConvolutionGpuOp(std::move(p)));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Convolution", CreateConvolution);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

// Convolution (MXNet, 2-D NCHW): data (N, C, H, W), weight (num_filter, C / num_group, kh,
// kw), bias (num_filter). CPU kernel: oneDNN convolution forward / backward data / backward
// weights through ConvOp (conv_op.h), in the layouts of ConvLayoutPolicy::kAvoidChannelPadding.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/nn/conv_op.h"
#include "ops/nn/conv_util.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

// MXNet 1.9's ConvolutionParam (src/operator/nn/convolution-inl.h), all 11 fields: kernel,
// stride, dilate, pad, num_filter, num_group, workspace, no_bias, cudnn_tune, cudnn_off,
// layout. Implemented, for 2-D data; layout only NCHW (the others are refused); workspace
// and cudnn_tune steer the GPU kernel's cuDNN; cudnn_off is ignored.
struct ConvolutionParam {
  Shape kernel;
  Shape stride;
  Shape dilate;
  Shape pad;
  int num_filter = 0;
  int num_group = 1;
  bool no_bias = false;
  int workspace = 1024;
  std::string cudnn_tune = "None";  // the GPU kernel's cuDNN algorithm choice
  bool cudnn_off = false;
  std::string layout = "None";  // MXNet's names; the schema refuses all but NCHW
  static const ParamSchema<ConvolutionParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<ConvolutionParam>("Convolution");
      AddConvWindowFields(s, "zero padding (h, w); default (0, 0)");
      AddConvChannelFields(s);
      AddLayoutField(s);
      return s;
    }();
    return *schema;
  }
};

// The parameters as numbers, after defaults.
struct Geometry {
  std::array<int64_t, 2> kernel, stride, dilate, pad;
};

class ConvolutionProp : public DnnlPropertyBase<ConvolutionProp, ConvolutionParam> {
 public:
  // A product mixed precision runs in the low type (graph/amp.h).
  bool RunsHalfTypes() const override { return true; }
  absl::Status Init(const KwArgs& kwargs) override {
    RETURN_IF_ERROR(PropertyWithParam::Init(kwargs));
    return GetGeometry().status();
  }

  std::vector<std::string> ListArguments() const override {
    if (param_.no_bias) return {"data", "weight"};
    return {"data", "weight", "bias"};
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[kConvData];
    if (!data.is_known()) return false;
    if (data.ndim() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Convolution: argument 'data' must be 4-D (N, C, H, W), got ", data.ToString()));
    }
    ASSIGN_OR_RETURN(Geometry g, GetGeometry());
    const int64_t channels = data[1];
    if (channels % param_.num_group != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Convolution: input channels ", channels, " of argument 'data' ",
                       data.ToString(), " are not divisible by num_group ", param_.num_group));
    }
    if (param_.num_filter % param_.num_group != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Convolution: num_filter ", param_.num_filter,
                                                     " is not divisible by num_group ",
                                                     param_.num_group));
    }
    const Shape wshape{param_.num_filter, channels / param_.num_group, g.kernel[0], g.kernel[1]};
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kConvWeight, wshape, in));
    if (!param_.no_bias) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kConvBias, Shape{param_.num_filter}, in));
    }
    Shape oshape{data[0], param_.num_filter, 0, 0};
    for (int i = 0; i < 2; ++i) {
      oshape[2 + i] = ConvOutLength(data[2 + i], g.kernel[i], g.stride[i], g.pad[i], g.dilate[i]);
      if (oshape[2 + i] <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Convolution: kernel ", param_.kernel.ToString(), " (dilate ",
                         param_.dilate.ToString(), ") does not fit argument 'data' ",
                         data.ToString(), " padded by ", param_.pad.ToString()));
      }
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, oshape, out));
    return true;
  }

  // As MXNet: the output is not needed for the gradients.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[kConvData], in_data[kConvWeight]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(CheckCpu(*this, ctx));
    ASSIGN_OR_RETURN(Geometry g, GetGeometry());
    const ConvolutionParam p = param_;
    auto descs = [p, g](const Shape& data) -> absl::StatusOr<ConvDescs> {
      ConvDescs d;
      const int64_t groups = p.num_group;
      const int64_t oh = ConvOutLength(data[2], g.kernel[0], g.stride[0], g.pad[0], g.dilate[0]);
      const int64_t ow = ConvOutLength(data[3], g.kernel[1], g.stride[1], g.pad[1], g.dilate[1]);
      d.src = PlainDesc(data);
      // Grouped weights are (G, O/G, I/G, kh, kw): the same memory as MXNet's (O, I/G, kh, kw).
      d.weights =
          groups == 1
              ? PlainDesc(dnnl::memory::dims{p.num_filter, data[1], g.kernel[0], g.kernel[1]})
              : PlainDesc(dnnl::memory::dims{groups, p.num_filter / groups, data[1] / groups,
                                             g.kernel[0], g.kernel[1]});
      if (!p.no_bias) d.bias = PlainDesc(dnnl::memory::dims{p.num_filter});
      d.dst = PlainDesc(dnnl::memory::dims{data[0], p.num_filter, oh, ow});
      d.strides = {g.stride[0], g.stride[1]};
      d.dilates = {g.dilate[0] - 1, g.dilate[1] - 1};  // oneDNN counts dilation from 0
      d.pad_l = {g.pad[0], g.pad[1]};
      d.pad_r = {g.pad[0], g.pad[1]};
      return d;
    };
    return std::unique_ptr<Operator>(
        new ConvOp<dnnl::convolution_forward, dnnl::convolution_backward_data,
                   dnnl::convolution_backward_weights>(
            dnnl::algorithm::convolution_direct, param_.no_bias,
            ConvLayoutPolicy::kAvoidChannelPadding, descs));
  }
  std::string TypeString() const override { return "Convolution"; }

 private:
  absl::StatusOr<Geometry> GetGeometry() const {
    Geometry g;
    ASSIGN_OR_RETURN(g.kernel, Pair2D(param_.kernel, 1, "Convolution", "kernel"));
    if (param_.kernel.ndim() == 0) {
      return absl::InvalidArgumentError("Convolution: parameter 'kernel' must be (h, w), got ()");
    }
    ASSIGN_OR_RETURN(g.stride, Pair2D(param_.stride, 1, "Convolution", "stride"));
    ASSIGN_OR_RETURN(g.dilate, Pair2D(param_.dilate, 1, "Convolution", "dilate"));
    ASSIGN_OR_RETURN(g.pad, Pair2D(param_.pad, 0, "Convolution", "pad"));
    return g;
  }
};

TESSERA_REGISTER_OP_PROPERTY(Convolution, ConvolutionProp)
    .Describe("2-D convolution over NCHW data (oneDNN), with groups, stride, pad and dilation.")
    .AddParams<ConvolutionParam>();

}  // namespace
}  // namespace tessera::ops::nn

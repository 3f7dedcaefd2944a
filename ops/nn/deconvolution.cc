// Deconvolution (MXNet, 2-D NCHW; the transpose of Convolution): data (N, C, H, W), weight
// (C, num_filter / num_group, kh, kw) as MXNet stores it, bias (num_filter); output
// (N, num_filter, (H-1)*stride - 2*pad + dilate*(k-1) + 1 + adj, ...). CPU kernel: oneDNN
// deconvolution primitives through ConvOp (conv_util.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/nn/conv_util.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

struct DeconvolutionParam {
  Shape kernel;
  Shape stride;
  Shape dilate;
  Shape pad;
  Shape adj;
  int num_filter = 0;
  int num_group = 1;
  bool no_bias = true;  // MXNet's default for Deconvolution
  int workspace = 512;
  // MXNet backend selection, kept so MXNet files load and round-trip; unused.
  std::string cudnn_tune = "None";
  bool cudnn_off = false;
  static const ParamSchema<DeconvolutionParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<DeconvolutionParam>("Deconvolution");
      AddConvWindowFields(s, "padding (h, w) removed from the output");
      s->Field("adj", &DeconvolutionParam::adj)
          .Lower(0)
          .Describe("extra rows/columns at the end of the output (h, w), each < stride");
      AddConvChannelFields(s);
      return s;
    }();
    return *schema;
  }
};

struct Geometry {
  std::array<int64_t, 2> kernel, stride, dilate, pad, adj;
};

int64_t DeconvOutLength(int64_t in, const Geometry& g, int i) {
  return (in - 1) * g.stride[i] - 2 * g.pad[i] + g.dilate[i] * (g.kernel[i] - 1) + 1 + g.adj[i];
}

class DeconvolutionProp : public DnnlPropertyBase<DeconvolutionProp, DeconvolutionParam> {
 public:
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
          "Deconvolution: argument 'data' must be 4-D (N, C, H, W), got ", data.ToString()));
    }
    ASSIGN_OR_RETURN(Geometry g, GetGeometry());
    const int64_t channels = data[1];
    if (channels % param_.num_group != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Deconvolution: input channels ", channels, " of argument 'data' ",
                       data.ToString(), " are not divisible by num_group ", param_.num_group));
    }
    if (param_.num_filter % param_.num_group != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Deconvolution: num_filter ", param_.num_filter,
                       " is not divisible by num_group ", param_.num_group));
    }
    const Shape wshape{channels, param_.num_filter / param_.num_group, g.kernel[0], g.kernel[1]};
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kConvWeight, wshape, in));
    if (!param_.no_bias) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kConvBias, Shape{param_.num_filter}, in));
    }
    Shape oshape{data[0], param_.num_filter, 0, 0};
    for (int i = 0; i < 2; ++i) {
      oshape[2 + i] = DeconvOutLength(data[2 + i], g, i);
      if (oshape[2 + i] <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("Deconvolution: pad ", param_.pad.ToString(),
                                                       " leaves no output for argument 'data' ",
                                                       data.ToString()));
      }
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, oshape, out));
    return true;
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[kConvData], in_data[kConvWeight]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(CheckCpu(*this, ctx));
    ASSIGN_OR_RETURN(Geometry g, GetGeometry());
    const DeconvolutionParam p = param_;
    auto descs = [p, g](const Shape& data) {
      using tag = dnnl::memory::format_tag;
      ConvDescs d;
      const int64_t groups = p.num_group;
      const int64_t oh = DeconvOutLength(data[2], g, 0);
      const int64_t ow = DeconvOutLength(data[3], g, 1);
      d.src = PlainDesc(data);
      // oneDNN's deconvolution weights are (O, I, kh, kw); MXNet stores (I, O, kh, kw), which
      // is oneDNN's iohw layout (giohw with groups) of the same dims.
      d.weights = groups == 1
                      ? dnnl::memory::desc({p.num_filter, data[1], g.kernel[0], g.kernel[1]},
                                           dnnl::memory::data_type::f32, tag::iohw)
                      : dnnl::memory::desc({groups, p.num_filter / groups, data[1] / groups,
                                            g.kernel[0], g.kernel[1]},
                                           dnnl::memory::data_type::f32, tag::giohw);
      if (!p.no_bias) d.bias = PlainDesc(dnnl::memory::dims{p.num_filter});
      d.dst = PlainDesc(dnnl::memory::dims{data[0], p.num_filter, oh, ow});
      d.strides = {g.stride[0], g.stride[1]};
      d.dilates = {g.dilate[0] - 1, g.dilate[1] - 1};
      d.pad_l = {g.pad[0], g.pad[1]};
      // adj extends the output at the end: less padding on the right.
      d.pad_r = {g.pad[0] - g.adj[0], g.pad[1] - g.adj[1]};
      return d;
    };
    return std::unique_ptr<Operator>(
        new ConvOp<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                   dnnl::deconvolution_backward_weights>(dnnl::algorithm::deconvolution_direct,
                                                         param_.no_bias, descs));
  }
  std::string TypeString() const override { return "Deconvolution"; }

 private:
  absl::StatusOr<Geometry> GetGeometry() const {
    Geometry g;
    if (param_.kernel.ndim() == 0) {
      return absl::InvalidArgumentError("Deconvolution: parameter 'kernel' must be (h, w), got ()");
    }
    ASSIGN_OR_RETURN(g.kernel, Pair2D(param_.kernel, 1, "Deconvolution", "kernel"));
    ASSIGN_OR_RETURN(g.stride, Pair2D(param_.stride, 1, "Deconvolution", "stride"));
    ASSIGN_OR_RETURN(g.dilate, Pair2D(param_.dilate, 1, "Deconvolution", "dilate"));
    ASSIGN_OR_RETURN(g.pad, Pair2D(param_.pad, 0, "Deconvolution", "pad"));
    ASSIGN_OR_RETURN(g.adj, Pair2D(param_.adj, 0, "Deconvolution", "adj"));
    for (int i = 0; i < 2; ++i) {
      if (g.adj[i] >= g.stride[i]) {
        return absl::InvalidArgumentError(absl::StrCat("Deconvolution: adj ", param_.adj.ToString(),
                                                       " must be smaller than stride ",
                                                       param_.stride.ToString()));
      }
    }
    return g;
  }
};

TESSERA_REGISTER_OP_PROPERTY(Deconvolution, DeconvolutionProp)
    .Describe("2-D transposed convolution over NCHW data (oneDNN); weight (in, out/group, kh, kw).")
    .AddParams<DeconvolutionParam>();

}  // namespace
}  // namespace tessera::ops::nn

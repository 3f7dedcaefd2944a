// Deconvolution (MXNet, 2-D NCHW; the transpose of Convolution): data (N, C, H, W), weight
// (C, num_filter / num_group, kh, kw) as MXNet stores it, bias (num_filter); output
// (N, num_filter, (H-1)*stride - 2*pad + dilate*(k-1) + 1 + adj, ...). With target_shape,
// pad and adj are not the parameters but computed per data shape so that the output is
// exactly target_shape (MXNet's DeconvolutionParam::InferPad). CPU kernel: oneDNN
// deconvolution primitives through ConvOp (conv_op.h).
#include <array>
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

// MXNet 1.9's DeconvolutionParam (src/operator/nn/deconvolution-inl.h), all 13 fields:
// kernel, stride, dilate, pad, adj, target_shape, num_filter, num_group, workspace, no_bias,
// cudnn_tune, cudnn_off, layout. Implemented, for 2-D data; layout only NCHW (the others
// are refused); workspace and cudnn_tune steer the GPU kernel's cuDNN; cudnn_off is ignored.
struct DeconvolutionParam {
  Shape kernel;
  Shape stride;
  Shape dilate;
  Shape pad;
  Shape adj;
  Shape target_shape;  // empty (or all zero, as MXNet): pad and adj as given
  int num_filter = 0;
  int num_group = 1;
  bool no_bias = true;  // MXNet's default for Deconvolution
  int workspace = 512;
  std::string cudnn_tune = "None";  // the GPU kernel's cuDNN algorithm choice
  bool cudnn_off = false;
  std::string layout = "None";  // MXNet's names; the schema refuses all but NCHW
  static const ParamSchema<DeconvolutionParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<DeconvolutionParam>("Deconvolution");
      AddConvWindowFields(s, "padding (h, w) removed from the output; ignored with target_shape");
      s->Field("adj", &DeconvolutionParam::adj)
          .Lower(0)
          .Describe(
              "extra rows/columns at the end of the output (h, w), each < stride; "
              "ignored with target_shape");
      s->Field("target_shape", &DeconvolutionParam::target_shape)
          .Lower(0)
          .Describe("output (h, w); when set, pad and adj are ignored and computed from it");
      AddConvChannelFields(s);
      AddLayoutField(s);
      return s;
    }();
    return *schema;
  }
};

struct Geometry {
  std::array<int64_t, 2> kernel, stride, dilate, pad, adj;
};

// The output length before pad and adj remove or add anything.
int64_t DeconvFullLength(int64_t in, const Geometry& g, int i) {
  return (in - 1) * g.stride[i] + g.dilate[i] * (g.kernel[i] - 1) + 1;
}

int64_t DeconvOutLength(int64_t in, const Geometry& g, int i) {
  return DeconvFullLength(in, g, i) - 2 * g.pad[i] + g.adj[i];
}

// MXNet leaves target_shape unset when it is empty or all zero.
bool HasTarget(const DeconvolutionParam& p) {
  for (int i = 0; i < p.target_shape.ndim(); ++i) {
    if (p.target_shape[i] != 0) return true;
  }
  return false;
}

// `g` for data shape `data`: with target_shape, MXNet's InferPad crops the full output to
// the target, ceil(excess / 2) from the start and floor(excess / 2) from the end:
// pad = ceil(excess / 2), adj = excess % 2. So pad >= adj and the output stays inside the
// full one, also at stride 1, where MXNet's adj < stride check refuses an odd excess; that
// crop is well defined, so it is accepted here.
absl::StatusOr<Geometry> GeometryFor(Geometry g, const DeconvolutionParam& p, const Shape& data) {
  if (!HasTarget(p)) return g;
  for (int i = 0; i < 2; ++i) {
    const int64_t full = DeconvFullLength(data[2 + i], g, i);
    const int64_t target = p.target_shape[i];
    if (full < target) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Deconvolution: target_shape ", p.target_shape.ToString(), " is larger than the ", full,
          " rows/columns that argument 'data' ", data.ToString(), " can give along dimension ",
          2 + i, " (stride * (in - 1) + dilate * (kernel - 1) + 1)"));
    }
    g.adj[i] = (full - target) % 2;
    g.pad[i] = (full - target + 1) / 2;
  }
  return g;
}

class DeconvolutionProp : public DnnlPropertyBase<DeconvolutionProp, DeconvolutionParam> {
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
          "Deconvolution: argument 'data' must be 4-D (N, C, H, W), got ", data.ToString()));
    }
    ASSIGN_OR_RETURN(Geometry base, GetGeometry());
    ASSIGN_OR_RETURN(Geometry g, GeometryFor(base, param_, data));
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
    ASSIGN_OR_RETURN(Geometry base, GetGeometry());
    const DeconvolutionParam p = param_;
    auto descs = [p, base](const Shape& data) -> absl::StatusOr<ConvDescs> {
      using tag = dnnl::memory::format_tag;
      ASSIGN_OR_RETURN(const Geometry g, GeometryFor(base, p, data));
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
                                                         param_.no_bias, ConvLayoutPolicy::kOneDnn,
                                                         descs));
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
    if (HasTarget(param_)) {
      std::array<int64_t, 2> target;
      ASSIGN_OR_RETURN(target, Pair2D(param_.target_shape, 0, "Deconvolution", "target_shape"));
      if (target[0] == 0 || target[1] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Deconvolution: parameter 'target_shape' must be positive in both "
                         "dimensions (or all zero for none), got ",
                         param_.target_shape.ToString()));
      }
      return g;  // pad and adj are ignored, as in MXNet
    }
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

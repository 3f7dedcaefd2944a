// Pooling (MXNet, 2-D NCHW): max, avg, sum and lp over windows, or over the whole plane
// with global_pool; output sizes by pooling_convention 'valid' (floor) or 'full' (ceil).
// CPU kernel: oneDNN pooling, except lp, which oneDNN lacks: a plain loop computing MXNet's
// y = (sum over the window of x^p)^(1/p), padding counting as zeros. Two more MXNet
// semantics oneDNN lacks are fixed up by a per-output factor: 'sum' is
// avg-including-padding times the window area, and 'avg' with count_include_pad under
// 'full' divides by the window clipped to the padded input (oneDNN always divides by the
// full window area). Max-pooling backward needs oneDNN's workspace of argmax positions,
// which Backward recomputes from in_data into temp space, so that nothing is kept in the
// Operator between Forward and Backward.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/nn/conv_util.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

enum class PoolType { kMax, kAvg, kSum, kLp };
enum class Convention { kValid, kFull };

struct PoolingParam {
  Shape kernel;
  PoolType pool_type = PoolType::kMax;
  bool global_pool = false;
  Shape stride;
  Shape pad;
  Convention pooling_convention = Convention::kValid;
  bool count_include_pad = true;
  int p_value = 0;              // lp's power; 0 is MXNet's None (unset)
  bool cudnn_off = false;       // MXNet backend selection; unused
  std::string layout = "None";  // MXNet's; only NCHW data is supported (Init checks)
  static const ParamSchema<PoolingParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<PoolingParam>("Pooling");
      s->Field("kernel", &PoolingParam::kernel)
          .Lower(1)
          .Describe("window (h, w); ignored with global_pool");
      s->Field("pool_type", &PoolingParam::pool_type)
          .Enum({{"max", PoolType::kMax},
                 {"avg", PoolType::kAvg},
                 {"sum", PoolType::kSum},
                 {"lp", PoolType::kLp}})
          .Describe("reduction over each window");
      s->Field("global_pool", &PoolingParam::global_pool).Describe("pool over the whole plane");
      s->Field("stride", &PoolingParam::stride).Lower(1).Describe("stride (h, w); default (1, 1)");
      s->Field("pad", &PoolingParam::pad).Lower(0).Describe("padding (h, w); default (0, 0)");
      s->Field("pooling_convention", &PoolingParam::pooling_convention)
          .Enum({{"valid", Convention::kValid}, {"full", Convention::kFull}})
          .Describe("output size: floor ('valid') or ceil ('full') of the window sweep");
      s->Field("count_include_pad", &PoolingParam::count_include_pad)
          .Describe("avg: whether padded elements count in the divisor");
      s->Field("p_value", &PoolingParam::p_value)
          .Lower(0)
          .Describe("lp: the power p (>= 1), y = (sum x^p)^(1/p); 0 or 'None': unset");
      s->Field("cudnn_off", &PoolingParam::cudnn_off)
          .Describe("accepted for MXNet compatibility; ignored");
      AddLayoutField(s);
      return s;
    }();
    return *schema;
  }
};

// The window for one data shape, after global_pool and defaults.
struct Window {
  std::array<int64_t, 2> kernel, stride, pad, out;
};

absl::StatusOr<Window> GetWindow(const PoolingParam& p, const Shape& data) {
  Window w;
  if (p.global_pool) {
    w.kernel = {data[2], data[3]};
    w.stride = {1, 1};
    w.pad = {0, 0};
    w.out = {1, 1};
    return w;
  }
  if (p.kernel.ndim() == 0) {
    return absl::InvalidArgumentError("Pooling: parameter 'kernel' is required unless global_pool");
  }
  ASSIGN_OR_RETURN(w.kernel, Pair2D(p.kernel, 1, "Pooling", "kernel"));
  ASSIGN_OR_RETURN(w.stride, Pair2D(p.stride, 1, "Pooling", "stride"));
  ASSIGN_OR_RETURN(w.pad, Pair2D(p.pad, 0, "Pooling", "pad"));
  for (int i = 0; i < 2; ++i) {
    const int64_t span = data[2 + i] + 2 * w.pad[i] - w.kernel[i];
    if (span < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pooling: kernel ", p.kernel.ToString(), " is larger than argument 'data' ",
                       data.ToString(), " padded by ", p.pad.ToString()));
    }
    if (w.pad[i] >= w.kernel[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Pooling: pad ", p.pad.ToString(), " must be smaller than kernel ", p.kernel.ToString()));
    }
    w.out[i] =
        1 + (p.pooling_convention == Convention::kValid ? span / w.stride[i]
                                                        : (span + w.stride[i] - 1) / w.stride[i]);
  }
  return w;
}

// lp pooling. x^p and its real p-th root: MXNet's identity / sqrt / cbrt for p = 1, 2, 3.
// MXNet has no p > 3; there pow(sum, 1/p) would be NaN for a negative sum (odd p), so the
// real root extends cbrt instead.
double PowP(double x, int p) {
  switch (p) {
    case 1:
      return x;
    case 2:
      return x * x;
    case 3:
      return x * x * x;
    default:
      return std::pow(x, p);
  }
}

double RootP(double sum, int p) {
  switch (p) {
    case 1:
      return sum;
    case 2:
      return std::sqrt(sum);
    case 3:
      return std::cbrt(sum);
    default:
      return std::copysign(std::pow(std::abs(sum), 1.0 / p), sum);
  }
}

// The input rows (i = 0) or columns (i = 1) [first, second) under output position `o`:
// the window clipped to the input, since padding adds only zeros to a sum of powers.
std::pair<int64_t, int64_t> Span(const Window& w, int i, int64_t o, int64_t in) {
  const int64_t start = o * w.stride[i] - w.pad[i];
  return {std::max<int64_t>(start, 0), std::min(start + w.kernel[i], in)};
}

// y = (sum over the window of x^p)^(1/p), stored per `req`; float32, accumulated in double.
absl::Status LpForward(const PoolingParam& param, const TBlob& x, OpReqType req, const TBlob& y) {
  ASSIGN_OR_RETURN(const Window w, GetWindow(param, x.shape));
  const int p = param.p_value;
  const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], wd = x.shape[3];
  const float* xs = x.data<float>();
  float* ys = y.data<float>();
  for (int64_t c = 0; c < planes; ++c) {
    const float* xp = xs + c * h * wd;
    float* yp = ys + c * w.out[0] * w.out[1];
    for (int64_t oh = 0; oh < w.out[0]; ++oh) {
      const auto [h0, h1] = Span(w, 0, oh, h);
      for (int64_t ow = 0; ow < w.out[1]; ++ow) {
        const auto [w0, w1] = Span(w, 1, ow, wd);
        double sum = 0;
        for (int64_t i = h0; i < h1; ++i) {
          for (int64_t j = w0; j < w1; ++j) sum += PowP(xp[i * wd + j], p);
        }
        Assign(yp + oh * w.out[1] + ow, req, RootP(sum, p));
      }
    }
  }
  return absl::OkStatus();
}

// dy/dx = (x / y)^(p-1) for each x in y's window (MXNet's lp_grad, 0 where y == 0), summed
// over the windows that overlap.
absl::Status LpBackward(const PoolingParam& param, const TBlob& dy, const TBlob& x, const TBlob& y,
                        OpReqType req, const TBlob& dx) {
  ASSIGN_OR_RETURN(const Window w, GetWindow(param, x.shape));
  const int p = param.p_value;
  const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], wd = x.shape[3];
  const float* xs = x.data<float>();
  const float* ys = y.data<float>();
  const float* dys = dy.data<float>();
  float* dxs = dx.data<float>();
  // Windows overlap, so gradients accumulate; kAddTo accumulates onto what is there.
  if (req != OpReqType::kAddTo) std::fill(dxs, dxs + dx.Size(), 0.0f);
  for (int64_t c = 0; c < planes; ++c) {
    const float* xp = xs + c * h * wd;
    float* dxp = dxs + c * h * wd;
    const int64_t out_offset = c * w.out[0] * w.out[1];
    for (int64_t oh = 0; oh < w.out[0]; ++oh) {
      const auto [h0, h1] = Span(w, 0, oh, h);
      for (int64_t ow = 0; ow < w.out[1]; ++ow) {
        const auto [w0, w1] = Span(w, 1, ow, wd);
        const double yv = ys[out_offset + oh * w.out[1] + ow];
        const double g = dys[out_offset + oh * w.out[1] + ow];
        for (int64_t i = h0; i < h1; ++i) {
          for (int64_t j = w0; j < w1; ++j) {
            const double d = p == 1 ? 1.0 : yv == 0 ? 0.0 : PowP(xp[i * wd + j] / yv, p - 1);
            dxp[i * wd + j] += static_cast<float>(g * d);
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

class PoolingOp : public DnnlOperator {
 public:
  explicit PoolingOp(PoolingParam param) : param_(param) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    if (param_.pool_type == PoolType::kLp) return LpForward(param_, in[0], req[0], out[0]);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[0].shape, &e));
    CallBuffers buf;
    const int dst = buf.Output(out[0], req[0]);
    const int sp = buf.Scratch(e->infer_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    // Inference propagation: no workspace is needed until Backward, which recomputes it.
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, BlobMemory(in[0], e->src, engine())},
        {DNNL_ARG_DST, buf.Memory(dst, e->dst, engine())}};
    AddScratchpad(buf, sp, e->infer_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->infer.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    if (!e->factor.empty()) Scale(e, buf.fptr(dst), buf.fptr(dst), out[0].Size());
    buf.Finish();
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    if (param_.pool_type == PoolType::kLp) {
      return LpBackward(param_, out_grad[0], in[0], out[0], req[0], in_grad[0]);
    }
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[0].shape, &e));
    RETURN_IF_ERROR(EnsureBackward(e));
    const bool is_max = param_.pool_type == PoolType::kMax;
    CallBuffers buf;
    const int dsrc = buf.Output(in_grad[0], req[0]);
    const int sp = buf.Scratch(
        std::max(e->train_pd.scratchpad_desc().get_size(), e->bwd_pd.scratchpad_desc().get_size()));
    const int ws = is_max ? buf.Scratch(e->train_pd.workspace_desc().get_size()) : -1;
    const int fwd_dst = is_max ? buf.Scratch(e->dst.get_size()) : -1;
    const int scaled = e->factor.empty() ? -1 : buf.Scratch(e->dst.get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    dnnl::memory workspace;
    if (is_max) {
      workspace = buf.Memory(ws, e->train_pd.workspace_desc(), engine());
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, BlobMemory(in[0], e->src, engine())},
          {DNNL_ARG_DST, buf.Memory(fwd_dst, e->dst, engine())},
          {DNNL_ARG_WORKSPACE, workspace}};
      AddScratchpad(buf, sp, e->train_pd.scratchpad_desc(), engine(), &args);
      DNNL_RETURN_IF_ERROR(e->train.execute(stream(), args));
    }
    dnnl::memory diff_dst = BlobMemory(out_grad[0], e->dst, engine());
    if (scaled >= 0) {
      // d(factor * pool)/dx = factor * dpool/dx: scale the incoming gradient.
      Scale(e, static_cast<const float*>(out_grad[0].dptr), buf.fptr(scaled), out_grad[0].Size());
      diff_dst = buf.Memory(scaled, e->dst, engine());
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, buf.Memory(dsrc, e->src, engine())}};
    if (is_max) args.insert({DNNL_ARG_WORKSPACE, workspace});
    AddScratchpad(buf, sp, e->bwd_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->bwd.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    return absl::OkStatus();
  }

 private:
  struct Entry {
    Window w;
    dnnl::algorithm alg;
    dnnl::memory::desc src, dst;
    dnnl::memory::dims strides, kernel, pad_l, pad_r;
    std::vector<float> factor;  // per output position (oh * OW + ow); empty: none
    dnnl::pooling_forward::primitive_desc infer_pd;
    dnnl::pooling_forward infer;
    bool has_backward = false;
    dnnl::pooling_forward::primitive_desc train_pd;
    dnnl::pooling_forward train;
    dnnl::pooling_backward::primitive_desc bwd_pd;
    dnnl::pooling_backward bwd;
  };

  // dst[i] = src[i] * factor[position of i].
  static void Scale(const Entry* e, const float* src, float* dst, int64_t n) {
    const int64_t plane = static_cast<int64_t>(e->factor.size());
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * e->factor[i % plane];
  }

  absl::Status GetEntry(const Shape& data, Entry** out) {
    return cache_.Get(data.ToString(), out, [&](Entry* e) -> absl::Status {
      ASSIGN_OR_RETURN(e->w, GetWindow(param_, data));
      const Window& w = e->w;
      e->src = PlainDesc(data);
      e->dst = PlainDesc(dnnl::memory::dims{data[0], data[1], w.out[0], w.out[1]});
      e->strides = {w.stride[0], w.stride[1]};
      e->kernel = {w.kernel[0], w.kernel[1]};
      e->pad_l = {w.pad[0], w.pad[1]};
      // Right padding that makes oneDNN produce exactly w.out windows ('full' needs more).
      e->pad_r = {(w.out[0] - 1) * w.stride[0] + w.kernel[0] - data[2] - w.pad[0],
                  (w.out[1] - 1) * w.stride[1] + w.kernel[1] - data[3] - w.pad[1]};
      switch (param_.pool_type) {
        case PoolType::kMax:
          e->alg = dnnl::algorithm::pooling_max;
          break;
        case PoolType::kAvg:
          e->alg = param_.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
          break;
        case PoolType::kSum:
          e->alg = dnnl::algorithm::pooling_avg_include_padding;
          break;
        case PoolType::kLp:  // LpForward / LpBackward, never a oneDNN primitive
          return absl::InternalError("Pooling: pool_type 'lp' has no oneDNN primitive");
      }
      const double area = static_cast<double>(w.kernel[0] * w.kernel[1]);
      const bool clipped = e->pad_r[0] > w.pad[0] || e->pad_r[1] > w.pad[1];
      if (param_.pool_type == PoolType::kSum ||
          (param_.pool_type == PoolType::kAvg && param_.count_include_pad && clipped)) {
        e->factor.resize(w.out[0] * w.out[1]);
        for (int64_t oh = 0; oh < w.out[0]; ++oh) {
          for (int64_t ow = 0; ow < w.out[1]; ++ow) {
            double f = area;
            if (param_.pool_type == PoolType::kAvg) {
              // MXNet's divisor: the window clipped to the padded input.
              const int64_t hs = oh * w.stride[0] - w.pad[0], ws = ow * w.stride[1] - w.pad[1];
              const int64_t he = std::min(hs + w.kernel[0], data[2] + w.pad[0]);
              const int64_t we = std::min(ws + w.kernel[1], data[3] + w.pad[1]);
              f = area / static_cast<double>((he - hs) * (we - ws));
            }
            e->factor[oh * w.out[1] + ow] = static_cast<float>(f);
          }
        }
      }
      DNNL_RETURN_IF_ERROR(
          e->infer_pd = dnnl::pooling_forward::primitive_desc(
              dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, e->alg, e->src,
                                          e->dst, e->strides, e->kernel, e->pad_l, e->pad_r),
              UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->infer = dnnl::pooling_forward(e->infer_pd));
      return absl::OkStatus();
    });
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    DNNL_RETURN_IF_ERROR(
        e->train_pd = dnnl::pooling_forward::primitive_desc(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, e->alg, e->src, e->dst,
                                        e->strides, e->kernel, e->pad_l, e->pad_r),
            UserScratchpadAttr(), engine()));
    DNNL_RETURN_IF_ERROR(e->train = dnnl::pooling_forward(e->train_pd));
    DNNL_RETURN_IF_ERROR(e->bwd_pd = dnnl::pooling_backward::primitive_desc(
                             dnnl::pooling_backward::desc(e->alg, e->src, e->dst, e->strides,
                                                          e->kernel, e->pad_l, e->pad_r),
                             UserScratchpadAttr(), engine(), e->train_pd));
    DNNL_RETURN_IF_ERROR(e->bwd = dnnl::pooling_backward(e->bwd_pd));
    e->has_backward = true;
    return absl::OkStatus();
  }

  const PoolingParam param_;
  PrimitiveCache<std::string, Entry> cache_;
};

class PoolingProp : public DnnlProperty<PoolingProp, PoolingParam, PoolingOp> {
 public:
  absl::Status Init(const KwArgs& kwargs) override {
    // An unset p_value ("None", see ops/param.h) keeps its default 0.
    RETURN_IF_ERROR(PropertyWithParam::Init(kwargs));
    if (!param_.global_pool && param_.kernel.ndim() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pooling: parameter 'kernel' must be (h, w) unless global_pool, got ",
                       param_.kernel.ToString()));
    }
    RETURN_IF_ERROR(CheckNchwLayout("Pooling", param_.layout));
    if (param_.pool_type == PoolType::kLp && param_.p_value < 1) {
      return absl::InvalidArgumentError(
          "Pooling: pool_type 'lp' needs p_value (1, 2, 3 or any integer >= 1), but it is "
          "unset (None or 0)");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[0];
    if (!data.is_known()) return false;
    if (data.ndim() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pooling: argument 'data' must be 4-D (N, C, H, W), got ", data.ToString()));
    }
    ASSIGN_OR_RETURN(Window w, GetWindow(param_, data));
    RETURN_IF_ERROR(
        AssignShape(*this, Slot::kOutput, 0, Shape{data[0], data[1], w.out[0], w.out[1]}, out));
    return true;
  }

  // Backward depends on everything (the default), as MXNet declares: out_grad, data, out.
  std::string TypeString() const override { return "Pooling"; }
};

TESSERA_REGISTER_OP_PROPERTY(Pooling, PoolingProp)
    .Describe(
        "2-D max / avg / sum / lp pooling over NCHW data (oneDNN; lp a loop), optionally global.")
    .AddParams<PoolingParam>();

}  // namespace
}  // namespace tessera::ops::nn

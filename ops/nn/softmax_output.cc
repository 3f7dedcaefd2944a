// SoftmaxOutput (MXNet): softmax forward, and as a loss layer a backward that ignores
// out_grad and gives (softmax - onehot(label)) * grad_scale / normalizer, where labels are
// class ids stored as floats. Softmax runs over axis 1 of the data flattened to 2-D, or over
// axis 1 of (N, C, ...) with multi_output (one label per position), or over the last axis
// with preserve_shape. use_ignore zeroes the gradient where label == ignore_label;
// normalization 'batch' divides by N and 'valid' by the count of labels != ignore_label.
// smooth_alpha > 0 smooths the target (label smoothing, as MXNet): 1 - alpha on the label's
// class and alpha / (C - 1) on each other class.
// Forward kernel: oneDNN softmax on an (outer, C, inner) view; backward: a loop.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/omp_threads.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

enum class Normalization { kNull, kBatch, kValid };

// MXNet 1.9's SoftmaxOutputParam (src/operator/softmax_output-inl.h), all 8 fields:
// grad_scale, ignore_label, multi_output, use_ignore, preserve_shape, normalization,
// out_grad, smooth_alpha. Implemented but out_grad, which uses the layer inside a network
// rather than as its loss (the gradient times the output's gradient): refused when true.
struct SoftmaxOutputParam {
  float grad_scale = 1.0f;
  float ignore_label = -1.0f;
  bool multi_output = false;
  bool use_ignore = false;
  bool preserve_shape = false;
  Normalization normalization = Normalization::kNull;
  bool out_grad = false;
  float smooth_alpha = 0.0f;
  static const ParamSchema<SoftmaxOutputParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<SoftmaxOutputParam>("SoftmaxOutput");
      s->Field("grad_scale", &SoftmaxOutputParam::grad_scale).Describe("scales the gradient");
      s->Field("ignore_label", &SoftmaxOutputParam::ignore_label)
          .Describe("the label whose gradient is zero with use_ignore");
      s->Field("multi_output", &SoftmaxOutputParam::multi_output)
          .Describe("softmax over axis 1 of (N, C, ...) with one label per position");
      s->Field("use_ignore", &SoftmaxOutputParam::use_ignore).Describe("honour ignore_label");
      s->Field("preserve_shape", &SoftmaxOutputParam::preserve_shape)
          .Describe("softmax over the last axis, keeping the shape");
      s->Field("normalization", &SoftmaxOutputParam::normalization)
          .Enum({{"null", Normalization::kNull},
                 {"batch", Normalization::kBatch},
                 {"valid", Normalization::kValid}})
          .Describe("divide the gradient by 1, the batch size or the count of valid labels");
      s->Field("out_grad", &SoftmaxOutputParam::out_grad)
          .SupportedOnly({false})
          .Describe("multiply the gradient by the output's gradient (a loss ignores it)");
      s->Field("smooth_alpha", &SoftmaxOutputParam::smooth_alpha)
          .Range(0, 1)
          .Describe("label smoothing: the target mass spread over the other classes");
      return s;
    }();
    return *schema;
  }
};

enum { kData, kLabel };

// (outer, classes, inner) of the softmax for a data shape.
std::array<int64_t, 3> View(const SoftmaxOutputParam& p, const Shape& data) {
  if (p.preserve_shape) {
    return {data.ProdRange(0, data.ndim() - 1), data[data.ndim() - 1], 1};
  }
  if (p.multi_output)
    return {data[0], data.ndim() > 1 ? data[1] : 1, data.ProdRange(2, data.ndim())};
  return {data[0], data.ProdRange(1, data.ndim()), 1};
}

Shape LabelShape(const SoftmaxOutputParam& p, const Shape& data) {
  if (p.preserve_shape) return Shape(data.begin(), data.end() - 1);
  if (p.multi_output) {
    Shape label{data[0]};
    for (int i = 2; i < data.ndim(); ++i) label.push_back(data[i]);
    return label;
  }
  return Shape{data[0]};
}

class SoftmaxOutputOp : public DnnlOperator {
 public:
  explicit SoftmaxOutputOp(SoftmaxOutputParam param) : param_(param) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    const auto v = View(param_, in[kData].shape);
    const dnnl::memory::dims dims = {v[0], v[1], v[2]};
    const int threads = MemoryBoundThreads(ctx, in[kData].Size());
    engine::ScopedOmpThreads omp(threads);
    Entry* entry;
    RETURN_IF_ERROR(cache_.Get({dims, threads}, &entry, [&](Entry* e) -> absl::Status {
      e->md = PlainDesc(dims);
      DNNL_RETURN_IF_ERROR(
          e->pd = dnnl::softmax_forward::primitive_desc(
              dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, e->md, 1),
              UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->fwd = dnnl::softmax_forward(e->pd));
      return absl::OkStatus();
    }));
    const Entry& e = *entry;
    CallBuffers buf;
    const int dst = buf.Output(out[0], req[0]);
    const int sp = buf.Scratch(e.pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, BlobMemory(in[kData], e.md, engine())},
        {DNNL_ARG_DST, buf.Memory(dst, e.md, engine())}};
    AddScratchpad(buf, sp, e.pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e.fwd.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const OpContext&, const std::vector<TBlob>&,
                            const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    const auto [outer, classes, inner] = View(param_, out[0].shape);
    const float* prob = static_cast<const float*>(out[0].dptr);
    const float* label = static_cast<const float*>(in[kLabel].dptr);
    const int64_t num_labels = outer * inner;
    const bool ignoring = param_.use_ignore;
    double normalizer = 1;
    if (param_.normalization == Normalization::kBatch) {
      normalizer = static_cast<double>(out[0].shape[0]);
    } else if (param_.normalization == Normalization::kValid) {
      int64_t valid = 0;
      for (int64_t i = 0; i < num_labels; ++i) valid += label[i] != param_.ignore_label;
      normalizer = static_cast<double>(std::max<int64_t>(valid, 1));
    }
    const float scale = static_cast<float>(param_.grad_scale / normalizer);
    const float on_target = 1.0f - param_.smooth_alpha;
    const float off_target = classes > 1 ? param_.smooth_alpha / static_cast<float>(classes - 1) : 0.0f;
    if (req[kData] != OpReqType::kNullOp) {
      float* grad = static_cast<float*>(in_grad[kData].dptr);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const float l = label[o * inner + i];
          const bool ignored = ignoring && l == param_.ignore_label;
          const int64_t k = static_cast<int64_t>(std::lround(l));
          if (!ignored && (k < 0 || k >= classes)) {
            return absl::InvalidArgumentError(absl::StrCat("SoftmaxOutput: label ", l,
                                                           " at position ", o * inner + i,
                                                           " is outside [0, ", classes, ")"));
          }
          for (int64_t c = 0; c < classes; ++c) {
            const int64_t idx = (o * classes + c) * inner + i;
            const float g = ignored ? 0.0f : (prob[idx] - (c == k ? on_target : off_target)) * scale;
            Assign(grad + idx, req[kData], g);
          }
        }
      }
    }
    // Labels are constants: zero gradient.
    float* label_grad = static_cast<float*>(in_grad[kLabel].dptr);
    for (int64_t i = 0; i < num_labels && req[kLabel] != OpReqType::kNullOp; ++i) {
      Assign(label_grad + i, req[kLabel], 0.0f);
    }
    return absl::OkStatus();
  }

 private:
  struct Entry {
    dnnl::memory::desc md;
    dnnl::softmax_forward::primitive_desc pd;
    dnnl::softmax_forward fwd;
  };
  const SoftmaxOutputParam param_;
  // Per softmax view and threads (MemoryBoundThreads).
  PrimitiveCache<std::pair<dnnl::memory::dims, int>, Entry> cache_;
};

class SoftmaxOutputProp
    : public DnnlProperty<SoftmaxOutputProp, SoftmaxOutputParam, SoftmaxOutputOp> {
 public:
  std::vector<std::string> ListArguments() const override { return {"data", "label"}; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[kData];
    if (!data.is_known()) return false;
    if (data.ndim() < 2 && !param_.preserve_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SoftmaxOutput: argument 'data' needs at least 2 dimensions, got ", data.ToString()));
    }
    Shape label = LabelShape(param_, data);
    if (label.ndim() == 0) label = Shape{1};
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kLabel, label, in));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, data, out));
    return true;
  }
  // Backward is a plain loop over the softmax output: no scratch.
  std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>&) const override {
    return {};
  }
  // The loss gradient needs only the label and the softmax output (not out_grad).
  std::vector<int> DeclareBackwardDependency(const std::vector<int>&,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {in_data[kLabel], out_data[0]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[kData], out_data[0]}};
  }
  std::string TypeString() const override { return "SoftmaxOutput"; }
};

TESSERA_REGISTER_OP_PROPERTY(SoftmaxOutput, SoftmaxOutputProp)
    .Describe("Softmax with a cross-entropy gradient against class-id labels (loss layer).")
    .AddParams<SoftmaxOutputParam>()
    .AddAlias("Softmax");  // MXNet 0.8's name

}  // namespace
}  // namespace tessera::ops::nn

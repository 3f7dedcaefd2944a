// FullyConnected (MXNet): out = data * weight^T + bias, with data flattened to 2-D
// (flatten=true: (N, rest); false: (all but last, last)). CPU kernel: oneDNN inner product
// forward, backward data and backward weights (+bias), primitives cached per input shape.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

struct FullyConnectedParam {
  int num_hidden = 0;
  bool no_bias = false;
  bool flatten = true;
  static const ParamSchema<FullyConnectedParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<FullyConnectedParam>("FullyConnected");
      s->Field("num_hidden", &FullyConnectedParam::num_hidden)
          .Required()
          .Lower(1)
          .Describe("number of hidden units (output features)");
      s->Field("no_bias", &FullyConnectedParam::no_bias).Describe("whether to omit the bias");
      s->Field("flatten", &FullyConnectedParam::flatten)
          .Describe("collapse all but the first axis of data (false: all but the last)");
      return s;
    }();
    return *schema;
  }
};

enum { kData, kWeight, kBias };

// (rows, features) of data as the inner product sees it.
std::pair<int64_t, int64_t> Flat(const Shape& data, bool flatten) {
  if (flatten) return {data[0], data.ProdRange(1, data.ndim())};
  return {data.ProdRange(0, data.ndim() - 1), data[data.ndim() - 1]};
}

class FullyConnectedOp : public DnnlOperator {
 public:
  explicit FullyConnectedOp(FullyConnectedParam param) : param_(param) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kData].shape, &e));
    CallBuffers buf;
    const int dst = buf.Output(out[0], req[0]);
    const int sp = buf.Scratch(e->fwd_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, BlobMemory(in[kData], e->src_md, engine())},
        {DNNL_ARG_WEIGHTS, BlobMemory(in[kWeight], e->weights_md, engine())},
        {DNNL_ARG_DST, buf.Memory(dst, e->dst_md, engine())}};
    if (!param_.no_bias) args.insert({DNNL_ARG_BIAS, BlobMemory(in[kBias], e->bias_md, engine())});
    AddScratchpad(buf, sp, e->fwd_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->fwd.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>& in, const std::vector<TBlob>&,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (AllNull(req)) return absl::OkStatus();
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kData].shape, &e));
    RETURN_IF_ERROR(EnsureBackward(e));
    const bool want_data = req[kData] != OpReqType::kNullOp;
    const bool want_weights =
        req[kWeight] != OpReqType::kNullOp || (!param_.no_bias && req[kBias] != OpReqType::kNullOp);
    CallBuffers buf;
    const int dsrc = buf.Output(in_grad[kData], req[kData]);
    const int dw = buf.Output(in_grad[kWeight], req[kWeight]);
    const int db = param_.no_bias ? -1 : buf.Output(in_grad[kBias], req[kBias]);
    const int sp_data = buf.Scratch(e->bwd_data_pd.scratchpad_desc().get_size());
    const int sp_w = buf.Scratch(e->bwd_weights_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    const dnnl::memory diff_dst = BlobMemory(out_grad[0], e->dst_md, engine());
    if (want_data) {
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_DIFF_DST, diff_dst},
          {DNNL_ARG_WEIGHTS, BlobMemory(in[kWeight], e->weights_md, engine())},
          {DNNL_ARG_DIFF_SRC, buf.Memory(dsrc, e->src_md, engine())}};
      AddScratchpad(buf, sp_data, e->bwd_data_pd.scratchpad_desc(), engine(), &args);
      DNNL_RETURN_IF_ERROR(e->bwd_data.execute(stream(), args));
    }
    if (want_weights) {
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_DIFF_DST, diff_dst},
          {DNNL_ARG_SRC, BlobMemory(in[kData], e->src_md, engine())},
          {DNNL_ARG_DIFF_WEIGHTS, buf.Memory(dw, e->weights_md, engine())}};
      if (db >= 0) args.insert({DNNL_ARG_DIFF_BIAS, buf.Memory(db, e->bias_md, engine())});
      AddScratchpad(buf, sp_w, e->bwd_weights_pd.scratchpad_desc(), engine(), &args);
      DNNL_RETURN_IF_ERROR(e->bwd_weights.execute(stream(), args));
    }
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    return absl::OkStatus();
  }

 private:
  // The primitives of one data shape; backward ones built on first backward.
  struct Entry {
    dnnl::memory::desc src_md, weights_md, bias_md, dst_md;
    dnnl::inner_product_forward::primitive_desc fwd_pd;
    dnnl::inner_product_forward fwd;
    bool has_backward = false;
    dnnl::inner_product_backward_data::primitive_desc bwd_data_pd;
    dnnl::inner_product_backward_data bwd_data;
    dnnl::inner_product_backward_weights::primitive_desc bwd_weights_pd;
    dnnl::inner_product_backward_weights bwd_weights;
  };

  absl::Status GetEntry(const Shape& data, Entry** out) {
    const std::string key = data.ToString();
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      *out = it->second.get();
      return absl::OkStatus();
    }
    auto e = std::make_unique<Entry>();
    const auto [m, k] = Flat(data, param_.flatten);
    const int64_t n = param_.num_hidden;
    e->src_md = PlainDesc(dnnl::memory::dims{m, k});
    e->weights_md = PlainDesc(dnnl::memory::dims{n, k});
    e->bias_md = PlainDesc(dnnl::memory::dims{n});
    e->dst_md = PlainDesc(dnnl::memory::dims{m, n});
    const dnnl::memory::desc no_bias;
    DNNL_RETURN_IF_ERROR(e->fwd_pd = dnnl::inner_product_forward::primitive_desc(
                             dnnl::inner_product_forward::desc(
                                 dnnl::prop_kind::forward_training, e->src_md, e->weights_md,
                                 param_.no_bias ? no_bias : e->bias_md, e->dst_md),
                             UserScratchpadAttr(), engine()));
    DNNL_RETURN_IF_ERROR(e->fwd = dnnl::inner_product_forward(e->fwd_pd));
    *out = e.get();
    cache_[key] = std::move(e);
    return absl::OkStatus();
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    const dnnl::memory::desc no_bias;
    DNNL_RETURN_IF_ERROR(
        e->bwd_data_pd = dnnl::inner_product_backward_data::primitive_desc(
            dnnl::inner_product_backward_data::desc(e->src_md, e->weights_md, e->dst_md),
            UserScratchpadAttr(), engine(), e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->bwd_data = dnnl::inner_product_backward_data(e->bwd_data_pd));
    DNNL_RETURN_IF_ERROR(
        e->bwd_weights_pd = dnnl::inner_product_backward_weights::primitive_desc(
            dnnl::inner_product_backward_weights::desc(
                e->src_md, e->weights_md, param_.no_bias ? no_bias : e->bias_md, e->dst_md),
            UserScratchpadAttr(), engine(), e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->bwd_weights = dnnl::inner_product_backward_weights(e->bwd_weights_pd));
    e->has_backward = true;
    return absl::OkStatus();
  }

  const FullyConnectedParam param_;
  std::map<std::string, std::unique_ptr<Entry>> cache_;
};

class FullyConnectedProp
    : public DnnlProperty<FullyConnectedProp, FullyConnectedParam, FullyConnectedOp> {
 public:
  std::vector<std::string> ListArguments() const override {
    if (param_.no_bias) return {"data", "weight"};
    return {"data", "weight", "bias"};
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[kData];
    if (!data.is_known()) return false;
    if (!param_.flatten && data.ndim() < 1) {
      return absl::InvalidArgumentError("FullyConnected: data needs at least one dimension");
    }
    const auto [m, k] = Flat(data, param_.flatten);
    (void)m;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kWeight, Shape{param_.num_hidden, k}, in));
    if (!param_.no_bias) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kBias, Shape{param_.num_hidden}, in));
    }
    Shape oshape;
    if (param_.flatten) {
      oshape = Shape{data[0], param_.num_hidden};
    } else {
      oshape = data;
      oshape[oshape.ndim() - 1] = param_.num_hidden;
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, oshape, out));
    return true;
  }

  // The output is not needed: gradients come from out_grad, data and weight.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[kData], in_data[kWeight]};
  }
  std::string TypeString() const override { return "FullyConnected"; }
};

TESSERA_REGISTER_OP_PROPERTY(FullyConnected, FullyConnectedProp)
    .Describe("Fully connected layer: out = data * weight^T + bias (oneDNN inner product).")
    .AddParams<FullyConnectedParam>();

}  // namespace
}  // namespace tessera::ops::nn

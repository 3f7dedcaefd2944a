// The 2-D window geometry shared by Convolution, Deconvolution and Pooling (MXNet's kernel /
// stride / pad / dilate tuples, with empty meaning the default), and ConvOp: one Operator
// for both convolution and deconvolution, whose oneDNN primitives (forward, backward data,
// backward weights) take the same descriptors. The property computes the descriptors for
// a data shape; the operator caches the primitives per data shape.
//
// The TBlobs are plain NCHW / (G)OIHW; the primitives pick their own layouts and ConvOp
// reorders through temp space (see ConvOp). Thread-compatible like every Operator.
#ifndef TESSERA_OPS_NN_CONV_UTIL_H_
#define TESSERA_OPS_NN_CONV_UTIL_H_

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "ops/nn/dnnl_util.h"
#include "ops/param.h"

namespace tessera::ops::nn {

// The parameter fields Convolution and Deconvolution share, in MXNet's order, for a
// parameter struct P with members of these names. The window: kernel, stride, dilate, pad.
template <typename P>
void AddConvWindowFields(ParamSchema<P>* s, const char* pad_doc) {
  s->Field("kernel", &P::kernel).Required().Lower(1).Describe("window (h, w)");
  s->Field("stride", &P::stride).Lower(1).Describe("stride (h, w); default (1, 1)");
  s->Field("dilate", &P::dilate).Lower(1).Describe("dilation (h, w); default (1, 1)");
  s->Field("pad", &P::pad).Lower(0).Describe(pad_doc);
}

// The channels and what MXNet writes for backend selection (accepted, ignored): num_filter,
// num_group, no_bias, workspace, cudnn_tune, cudnn_off.
template <typename P>
void AddConvChannelFields(ParamSchema<P>* s) {
  s->Field("num_filter", &P::num_filter).Required().Lower(1).Describe("output channels");
  s->Field("num_group", &P::num_group).Lower(1).Describe("groups of channels");
  s->Field("no_bias", &P::no_bias).Describe("whether to omit the bias");
  s->Field("workspace", &P::workspace)
      .Lower(0)
      .Describe("MB of workspace (accepted for MXNet compatibility; oneDNN sizes its own)");
  s->Field("cudnn_tune", &P::cudnn_tune)
      .Enum({{"None", "None"}, {"off", "off"}, {"limited_workspace", "limited_workspace"}, {"fastest", "fastest"}})
      .Describe("cuDNN algorithm search (accepted for MXNet compatibility; ignored)");
  s->Field("cudnn_off", &P::cudnn_off).Describe("accepted for MXNet compatibility; ignored");
}

// MXNet's `layout` parameter (P::layout, a string), with MXNet's names. Only NCHW data is
// supported: CheckNchwLayout refuses the others by name at Init, so a model that needs
// NHWC fails when it is built, not with wrong numbers.
template <typename P>
void AddLayoutField(ParamSchema<P>* s) {
  s->Field("layout", &P::layout)
      .Enum({{"None", "None"},
             {"NCW", "NCW"},
             {"NCHW", "NCHW"},
             {"NCDHW", "NCDHW"},
             {"NWC", "NWC"},
             {"NHWC", "NHWC"},
             {"NDHWC", "NDHWC"}})
      .Describe("data layout (MXNet's names); only 'None' and 'NCHW' are supported");
}

inline absl::Status CheckNchwLayout(const std::string& op, const std::string& layout) {
  if (layout == "None" || layout == "NCHW") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": layout '", layout,
                                                 "' is not supported; data must be NCHW "
                                                 "(layout 'None' or 'NCHW')"));
}

// A (h, w) tuple parameter: empty means `fallback` for both; anything but 2 values is an
// error naming the operator and parameter.
inline absl::StatusOr<std::array<int64_t, 2>> Pair2D(const Shape& value, int64_t fallback,
                                                     const std::string& op, const char* name) {
  if (value.ndim() == 0) return std::array<int64_t, 2>{fallback, fallback};
  if (value.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": parameter '", name, "' must be (h, w) for ", "2-D data, got ", value.ToString()));
  }
  return std::array<int64_t, 2>{value[0], value[1]};
}

// Output length of a convolution window sweep (floor), before checking it is positive.
inline int64_t ConvOutLength(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                             int64_t dilate) {
  return (in + 2 * pad - (dilate * (kernel - 1) + 1)) / stride + 1;
}

struct ConvDescs {
  dnnl::memory::desc src, weights, bias, dst;  // bias empty without bias
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
};

enum { kConvData, kConvWeight, kConvBias };

// A reorder from one layout to another, or nothing when they are the same.
struct Reorder {
  bool needed = false;
  dnnl::memory::desc from, to;
  dnnl::reorder prim;
};

// Throws dnnl::error (callers wrap it in DNNL_RETURN_IF_ERROR).
inline Reorder MakeReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                           const dnnl::engine& eng) {
  Reorder r;
  r.from = from;
  r.to = to;
  r.needed = from != to;
  if (r.needed) r.prim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, from, eng, to));
  return r;
}

// Convolution-like operator over primitives Fwd / BwdData / BwdWeights (convolution_* or
// deconvolution_*), algorithm `alg`. The primitives choose their own (blocked) layouts
// (format_tag::any): on CPUs with AVX-512 they run about twice as fast as on plain NCHW,
// which more than pays for reordering the tensors in and out through temp space (the
// reorders cost ~10% against oneDNN kept in its own layouts, see bench/ops_bench.cc).
template <typename Fwd, typename BwdData, typename BwdWeights>
class ConvOp : public DnnlOperator {
 public:
  // The descriptors for a data shape; an error for a shape the parameters cannot take.
  using DescFn = std::function<absl::StatusOr<ConvDescs>(const Shape& data)>;
  ConvOp(dnnl::algorithm alg, bool no_bias, DescFn descs)
      : alg_(alg), no_bias_(no_bias), descs_(std::move(descs)) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kConvData].shape, &e));
    CallBuffers buf;
    const int dst = buf.Output(out[0], req[0]);
    const int src_s = Stage(e->src_in, &buf);
    const int wei_s = Stage(e->wei_in, &buf);
    const int dst_s = Stage(e->dst_out, &buf);
    const int sp = buf.Scratch(e->fwd_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, In(e->src_in, in[kConvData].dptr, src_s, buf)},
        {DNNL_ARG_WEIGHTS, In(e->wei_in, in[kConvWeight].dptr, wei_s, buf)},
        {DNNL_ARG_DST, OutMemory(e->dst_out, dst, dst_s, buf)}};
    if (!no_bias_) args.insert({DNNL_ARG_BIAS, BlobMemory(in[kConvBias], e->d.bias, engine())});
    AddScratchpad(buf, sp, e->fwd_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->fwd.execute(stream(), args));
    Out(e->dst_out, dst, dst_s, buf);
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
    RETURN_IF_ERROR(GetEntry(in[kConvData].shape, &e));
    RETURN_IF_ERROR(EnsureBackward(e));
    const bool want_data = req[kConvData] != OpReqType::kNullOp;
    const bool want_weights = req[kConvWeight] != OpReqType::kNullOp ||
                              (!no_bias_ && req[kConvBias] != OpReqType::kNullOp);
    CallBuffers buf;
    const int dsrc = buf.Output(in_grad[kConvData], req[kConvData]);
    const int dw = buf.Output(in_grad[kConvWeight], req[kConvWeight]);
    const int db = no_bias_ ? -1 : buf.Output(in_grad[kConvBias], req[kConvBias]);
    const int ddst_d = want_data ? Stage(e->ddst_in_d, &buf) : -1;
    const int wei_d = want_data ? Stage(e->wei_in_d, &buf) : -1;
    const int dsrc_s = want_data ? Stage(e->dsrc_out, &buf) : -1;
    const int src_w = want_weights ? Stage(e->src_in_w, &buf) : -1;
    // Both backward primitives usually want diff_dst in the same layout: reorder it once.
    const bool share_ddst = want_data && e->ddst_in_d.needed && e->ddst_in_w.needed &&
                            e->ddst_in_d.to == e->ddst_in_w.to;
    const int ddst_w = want_weights && !share_ddst ? Stage(e->ddst_in_w, &buf) : -1;
    const int dw_s = want_weights ? Stage(e->dwei_out, &buf) : -1;
    const int sp = buf.Scratch(std::max(e->bwd_data_pd.scratchpad_desc().get_size(),
                                        e->bwd_weights_pd.scratchpad_desc().get_size()));
    RETURN_IF_ERROR(buf.Allocate(ctx));
    dnnl::memory diff_dst_d;
    if (want_data) {
      diff_dst_d = In(e->ddst_in_d, out_grad[0].dptr, ddst_d, buf);
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_DIFF_DST, diff_dst_d},
          {DNNL_ARG_WEIGHTS, In(e->wei_in_d, in[kConvWeight].dptr, wei_d, buf)},
          {DNNL_ARG_DIFF_SRC, OutMemory(e->dsrc_out, dsrc, dsrc_s, buf)}};
      AddScratchpad(buf, sp, e->bwd_data_pd.scratchpad_desc(), engine(), &args);
      DNNL_RETURN_IF_ERROR(e->bwd_data.execute(stream(), args));
      Out(e->dsrc_out, dsrc, dsrc_s, buf);
    }
    if (want_weights) {
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_DIFF_DST,
           share_ddst ? diff_dst_d : In(e->ddst_in_w, out_grad[0].dptr, ddst_w, buf)},
          {DNNL_ARG_SRC, In(e->src_in_w, in[kConvData].dptr, src_w, buf)},
          {DNNL_ARG_DIFF_WEIGHTS, OutMemory(e->dwei_out, dw, dw_s, buf)}};
      if (db >= 0) args.insert({DNNL_ARG_DIFF_BIAS, buf.Memory(db, e->d.bias, engine())});
      AddScratchpad(buf, sp, e->bwd_weights_pd.scratchpad_desc(), engine(), &args);
      DNNL_RETURN_IF_ERROR(e->bwd_weights.execute(stream(), args));
      Out(e->dwei_out, dw, dw_s, buf);
    }
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    return absl::OkStatus();
  }

 private:
  struct Entry {
    ConvDescs d;  // the user's (plain) layouts
    typename Fwd::primitive_desc fwd_pd;
    Fwd fwd;
    Reorder src_in, wei_in, dst_out;
    bool has_backward = false;
    typename BwdData::primitive_desc bwd_data_pd;
    BwdData bwd_data;
    Reorder ddst_in_d, wei_in_d, dsrc_out;
    typename BwdWeights::primitive_desc bwd_weights_pd;
    BwdWeights bwd_weights;
    Reorder src_in_w, ddst_in_w, dwei_out;
  };

  // Scratch for the primitive-side tensor of `r`, if it needs one.
  static int Stage(const Reorder& r, CallBuffers* buf) {
    // Blocked layouts may pad channels, so size by the larger of the two.
    return r.needed ? buf->Scratch(std::max(r.from.get_size(), r.to.get_size())) : -1;
  }
  // The input at `data` in the primitive's layout (reordered into `slot` when needed).
  dnnl::memory In(const Reorder& r, void* data, int slot, const CallBuffers& buf) {
    dnnl::memory user(r.from, engine(), data);
    if (!r.needed) return user;
    dnnl::memory staged = buf.Memory(slot, r.to, engine());
    r.prim.execute(stream(), user, staged);
    return staged;
  }
  // Where the primitive writes output slot `out`: staging `slot` when it needs a reorder.
  dnnl::memory OutMemory(const Reorder& r, int out, int slot, const CallBuffers& buf) {
    return r.needed ? buf.Memory(slot, r.from, engine()) : buf.Memory(out, r.to, engine());
  }
  // Reorders a staged output into its slot (a no-op when written directly).
  void Out(const Reorder& r, int out, int slot, const CallBuffers& buf) {
    if (!r.needed) return;
    dnnl::memory staged = buf.Memory(slot, r.from, engine());
    dnnl::memory user = buf.Memory(out, r.to, engine());
    r.prim.execute(stream(), staged, user);
  }

  static dnnl::memory::desc Any(const dnnl::memory::desc& md) {
    return dnnl::memory::desc(md.dims(), dnnl::memory::data_type::f32,
                              dnnl::memory::format_tag::any);
  }

  absl::Status GetEntry(const Shape& data, Entry** out) {
    const std::string key = data.ToString();
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      *out = it->second.get();
      return absl::OkStatus();
    }
    auto e = std::make_unique<Entry>();
    ASSIGN_OR_RETURN(e->d, descs_(data));
    const ConvDescs& d = e->d;
    DNNL_RETURN_IF_ERROR(
        e->fwd_pd = typename Fwd::primitive_desc(
            typename Fwd::desc(dnnl::prop_kind::forward_training, alg_, Any(d.src), Any(d.weights),
                               d.bias, Any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r),
            UserScratchpadAttr(), engine()));
    DNNL_RETURN_IF_ERROR(e->fwd = Fwd(e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->src_in = MakeReorder(d.src, e->fwd_pd.src_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->wei_in = MakeReorder(d.weights, e->fwd_pd.weights_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->dst_out = MakeReorder(e->fwd_pd.dst_desc(), d.dst, engine()));
    *out = e.get();
    cache_[key] = std::move(e);
    return absl::OkStatus();
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    const ConvDescs& d = e->d;
    DNNL_RETURN_IF_ERROR(e->bwd_data_pd = typename BwdData::primitive_desc(
                             typename BwdData::desc(alg_, Any(d.src), Any(d.weights), Any(d.dst),
                                                    d.strides, d.dilates, d.pad_l, d.pad_r),
                             UserScratchpadAttr(), engine(), e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->bwd_data = BwdData(e->bwd_data_pd));
    DNNL_RETURN_IF_ERROR(e->ddst_in_d =
                             MakeReorder(d.dst, e->bwd_data_pd.diff_dst_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->wei_in_d =
                             MakeReorder(d.weights, e->bwd_data_pd.weights_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->dsrc_out =
                             MakeReorder(e->bwd_data_pd.diff_src_desc(), d.src, engine()));
    DNNL_RETURN_IF_ERROR(
        e->bwd_weights_pd = typename BwdWeights::primitive_desc(
            typename BwdWeights::desc(alg_, Any(d.src), Any(d.weights), d.bias, Any(d.dst),
                                      d.strides, d.dilates, d.pad_l, d.pad_r),
            UserScratchpadAttr(), engine(), e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->bwd_weights = BwdWeights(e->bwd_weights_pd));
    DNNL_RETURN_IF_ERROR(e->src_in_w = MakeReorder(d.src, e->bwd_weights_pd.src_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->ddst_in_w =
                             MakeReorder(d.dst, e->bwd_weights_pd.diff_dst_desc(), engine()));
    DNNL_RETURN_IF_ERROR(
        e->dwei_out = MakeReorder(e->bwd_weights_pd.diff_weights_desc(), d.weights, engine()));
    e->has_backward = true;
    return absl::OkStatus();
  }

  const dnnl::algorithm alg_;
  const bool no_bias_;
  const DescFn descs_;
  std::map<std::string, std::unique_ptr<Entry>> cache_;
};

}  // namespace tessera::ops::nn

#endif  // TESSERA_OPS_NN_CONV_UTIL_H_

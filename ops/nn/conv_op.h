// ConvOp: the CPU Operator behind Convolution and Deconvolution, whose oneDNN primitives
// (forward, backward data, backward weights) take the same descriptors. The property
// computes the descriptors for a data shape (DescFn); the operator caches the primitives
// per data shape and RunContext::cpu_threads. oneDNN fixes a primitive's threads when it is
// created, so each entry is created and run under its own thread count (ThreadsForWork).
// Thread-compatible like every Operator.
#ifndef TESSERA_OPS_NN_CONV_OP_H_
#define TESSERA_OPS_NN_CONV_OP_H_

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "dnnl.hpp"
#include "engine/omp_threads.h"
#include "ops/nn/dnnl_util.h"

namespace tessera::ops::nn {

// The layouts ConvOp runs its primitives in (its TBlobs are plain either way).
enum class ConvLayoutPolicy {
  // oneDNN's own choice (format_tag::any): channel-blocked nChw16c on AVX-512, where it
  // runs about twice as fast as on plain NCHW.
  kOneDnn,
  // oneDNN's choice unless that pads the channels of the source or destination (blocks of
  // 16 over 20 or 50 channels move 1.3-1.6x the bytes, over 1-4 channels up to 16x): then
  // NHWC, or where NHWC lacks a jit kernel and the input has at most 4 channels, a plain
  // NCHW source (oneDNN's first-layer kernels read it directly). NHWC wins for first layers
  // too because their weight gradient has a jit kernel there, where a plain source gets the
  // gemm one (LeNet's 1->20: 0.8 ms against 4.4). README's table has the measurements.
  kAvoidChannelPadding,
};

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
// deconvolution_*), algorithm `alg`. The TBlobs are plain NCHW / (G)OIHW; the primitives run
// in the layouts of `policy` (ConvLayoutPolicy) and ConvOp reorders the tensors in and out
// through temp space.
//
// A training Forward keeps its reordered source (SavedSource) for the Backward that
// follows it, whose weight gradient needs the same tensor in the same layout: one reorder
// fewer per step, at the price of one input-sized buffer per operator.
template <typename Fwd, typename BwdData, typename BwdWeights>
class ConvOp : public DnnlOperator {
 public:
  // The descriptors for a data shape; an error for a shape the parameters cannot take.
  using DescFn = std::function<absl::StatusOr<ConvDescs>(const Shape& data)>;
  ConvOp(dnnl::algorithm alg, bool no_bias, ConvLayoutPolicy policy, DescFn descs)
      : alg_(alg), no_bias_(no_bias), policy_(policy), descs_(std::move(descs)) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kConvData], ctx.run_ctx.cpu_threads, &e));
    engine::ScopedOmpThreads threads(e->threads);  // the reorders' too
    saved_.entry = nullptr;  // whatever it held belongs to an earlier call
    const bool save_src = ctx.is_train && e->src_in.needed;
    CallBuffers buf;
    const int dst = buf.Output(out[0], req[0]);
    const int src_s = save_src ? -1 : Stage(e->src_in, &buf);
    const int wei_s = Stage(e->wei_in, &buf);
    const int dst_s = Stage(e->dst_out, &buf);
    const int sp = buf.Scratch(e->fwd_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    dnnl::memory src;
    if (save_src) {
      DNNL_RETURN_IF_ERROR(src = SaveSource(*e, in[kConvData].dptr));
    } else {
      src = In(e->src_in, in[kConvData].dptr, src_s, buf);
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src},
        {DNNL_ARG_WEIGHTS, In(e->wei_in, in[kConvWeight].dptr, wei_s, buf)},
        {DNNL_ARG_DST, OutMemory(e->dst_out, dst, dst_s, buf)}};
    if (!no_bias_) args.insert({DNNL_ARG_BIAS, BlobMemory(in[kConvBias], e->d.bias, engine())});
    AddScratchpad(buf, sp, e->fwd_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->fwd.execute(stream(), args));
    Out(e->dst_out, dst, dst_s, buf);
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    if (save_src) {
      saved_.entry = e;
      saved_.data = in[kConvData].dptr;
    }
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>& in, const std::vector<TBlob>&,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (AllNull(req)) return absl::OkStatus();
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kConvData], ctx.run_ctx.cpu_threads, &e));
    engine::ScopedOmpThreads threads(e->threads);
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
    // The source as the training Forward saved it, when the weight gradient reads that
    // layout: this call's `in` is that Forward's input (see Operator::Backward).
    const bool saved_src = want_weights && saved_.entry == e && saved_.data == in[kConvData].dptr &&
                           e->src_in_w.needed && e->src_in_w.to == saved_.mem.get_desc();
    const int src_w = want_weights && !saved_src ? Stage(e->src_in_w, &buf) : -1;
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
          {DNNL_ARG_SRC, saved_src ? saved_.mem : In(e->src_in_w, in[kConvData].dptr, src_w, buf)},
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
    int threads = 1;  // the OpenMP threads its primitives were created with and run on
    // What the primitives were created with for src / diff_src and dst / diff_dst: `any`,
    // NHWC or plain, per the policy (ChooseLayouts).
    dnnl::memory::desc src_md, dst_md;
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

  // A training Forward's source in the forward primitive's layout, for the Backward after it.
  struct SavedSource {
    dnnl::memory mem;              // allocated by oneDNN, reused while the layout is the same
    const Entry* entry = nullptr;  // null: nothing valid saved
    const void* data = nullptr;    // the input blob it is a reorder of
  };

  // Reorders the input at `data` into saved_.mem (throws dnnl::error).
  dnnl::memory SaveSource(const Entry& e, void* data) {
    if (!saved_.mem || saved_.mem.get_desc() != e.src_in.to) {
      saved_.mem = dnnl::memory(e.src_in.to, engine());
    }
    dnnl::memory user(e.src_in.from, engine(), data);
    e.src_in.prim.execute(stream(), user, saved_.mem);
    return saved_.mem;
  }

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

  // bfloat16 convolutions run natively where that is fast (mixed precision's products):
  // every tensor bfloat16, the primitives accumulating in float32. Not with kAddTo outputs
  // (CallBuffers adds float32) nor for deconvolutions (not measured): those are staged.
  bool RunsNatively(DType type, const std::vector<OpReqType>& req) const override {
    return alg_ == dnnl::algorithm::convolution_direct && NativeBFloat16Call(type, req);
  }

  static dnnl::memory::desc WithTag(const dnnl::memory::desc& md, dnnl::memory::format_tag tag) {
    return dnnl::memory::desc(md.dims(), md.data_type(), tag);
  }
  // `md` holding elements of `type` (float32 or bfloat16), in the same layout.
  static dnnl::memory::desc WithType(const dnnl::memory::desc& md, dnnl::memory::data_type type) {
    if (md.is_zero()) return md;  // no bias
    dnnl::memory::desc typed = md;
    typed.data.data_type = static_cast<dnnl_data_type_t>(type);
    return typed;
  }
  static dnnl::memory::desc Any(const dnnl::memory::desc& md) {
    return WithTag(md, dnnl::memory::format_tag::any);
  }
  // Whether a layout rounds the channels (dimension 1) up to its block size.
  static bool PadsChannels(const dnnl::memory::desc& md) {
    return md.data.padded_dims[1] != md.data.dims[1];
  }

  typename Fwd::primitive_desc ForwardDesc(const ConvDescs& d, const dnnl::memory::desc& src,
                                           const dnnl::memory::desc& dst) const {
    return typename Fwd::primitive_desc(
        typename Fwd::desc(dnnl::prop_kind::forward_training, alg_, src, Any(d.weights), d.bias,
                           dst, d.strides, d.dilates, d.pad_l, d.pad_r),
        UserScratchpadAttr(), engine());
  }

  typename BwdData::primitive_desc BackwardDataDesc(const Entry& e) const {
    const ConvDescs& d = e.d;
    return typename BwdData::primitive_desc(
        typename BwdData::desc(alg_, e.src_md, Any(d.weights), e.dst_md, d.strides, d.dilates,
                               d.pad_l, d.pad_r),
        UserScratchpadAttr(), engine(), e.fwd_pd);
  }
  typename BwdWeights::primitive_desc BackwardWeightsDesc(const Entry& e) const {
    const ConvDescs& d = e.d;
    return typename BwdWeights::primitive_desc(
        typename BwdWeights::desc(alg_, e.src_md, Any(d.weights), d.bias, e.dst_md, d.strides,
                                  d.dilates, d.pad_l, d.pad_r),
        UserScratchpadAttr(), engine(), e.fwd_pd);
  }
  // oneDNN's reference kernels run any layout, hundreds of times slower than its jit ones.
  template <typename PrimitiveDesc>
  static bool IsReference(const PrimitiveDesc& pd) {
    return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
  }

  // Whether every direction has a jit kernel with src / dst in `src_md` / `dst_md`; if so,
  // e->fwd_pd and e->src_md / dst_md become those. Throws nothing.
  bool TryLayouts(Entry* e, const dnnl::memory::desc& src_md,
                  const dnnl::memory::desc& dst_md) const {
    Entry candidate;
    candidate.d = e->d;
    candidate.src_md = src_md;
    candidate.dst_md = dst_md;
    try {
      candidate.fwd_pd = ForwardDesc(e->d, src_md, dst_md);
      // The backward primitives are built later, in EnsureBackward, from the same layouts.
      if (IsReference(candidate.fwd_pd) || IsReference(BackwardDataDesc(candidate)) ||
          IsReference(BackwardWeightsDesc(candidate))) {
        return false;
      }
    } catch (const dnnl::error&) {
      return false;  // no kernel for these layouts here
    }
    e->fwd_pd = candidate.fwd_pd;
    e->src_md = src_md;
    e->dst_md = dst_md;
    return true;
  }

  // Creates e->fwd_pd in the layouts of policy_ and records them in e->src_md / dst_md.
  // Throws dnnl::error.
  void ChooseLayouts(Entry* e) const {
    const ConvDescs& d = e->d;
    e->src_md = Any(d.src);
    e->dst_md = Any(d.dst);
    e->fwd_pd = ForwardDesc(d, e->src_md, e->dst_md);
    // Grouped convolutions keep oneDNN's choice: the rule was measured on dense ones.
    if (policy_ != ConvLayoutPolicy::kAvoidChannelPadding || d.weights.dims().size() != 4) return;
    if (!PadsChannels(e->fwd_pd.src_desc()) && !PadsChannels(e->fwd_pd.dst_desc())) return;
    using tag = dnnl::memory::format_tag;
    if (TryLayouts(e, WithTag(d.src, tag::nhwc), WithTag(d.dst, tag::nhwc))) return;
    if (d.src.dims()[1] <= kFewInputChannels) TryLayouts(e, d.src, Any(d.dst));
  }

  // The floating-point operations of one forward call, 2 per multiply-add (each backward
  // direction does as many).
  double Flops(const ConvDescs& d) const {
    // Every output element (a deconvolution: every input element) meets one filter's
    // worth of weights: all of them over the channels they span.
    const dnnl::memory::desc& per = alg_ == dnnl::algorithm::deconvolution_direct ? d.src : d.dst;
    double elements = 1, weights = 1;
    for (int64_t v : per.dims()) elements *= static_cast<double>(v);
    for (int64_t v : d.weights.dims()) weights *= static_cast<double>(v);
    return 2 * elements * weights / static_cast<double>(std::max<int64_t>(1, per.dims()[1]));
  }

  // The entry for blob `data`'s shape and type on a function that may use `cpu_threads`
  // (RunContext); created, with its forward primitive, under the threads its work repays.
  absl::Status GetEntry(const TBlob& data, int cpu_threads, Entry** out) {
    const std::string key = absl::StrCat(data.shape.ToString(), "/", cpu_threads, "/", DTypeName(data.dtype));
    return cache_.Get(key, out, [&](Entry* e) -> absl::Status {
      ASSIGN_OR_RETURN(e->d, descs_(data.shape));
      if (data.dtype == DType::kBFloat16) {  // RunsNatively
        for (dnnl::memory::desc* md : {&e->d.src, &e->d.weights, &e->d.bias, &e->d.dst}) {
          *md = WithType(*md, dnnl::memory::data_type::bf16);
        }
      }
      const ConvDescs& d = e->d;
      e->threads = engine::ThreadsForWork(Flops(d), cpu_threads);
      engine::ScopedOmpThreads threads(e->threads);
      DNNL_RETURN_IF_ERROR(ChooseLayouts(e));
      DNNL_RETURN_IF_ERROR(e->fwd = Fwd(e->fwd_pd));
      DNNL_RETURN_IF_ERROR(e->src_in = MakeReorder(d.src, e->fwd_pd.src_desc(), engine()));
      DNNL_RETURN_IF_ERROR(e->wei_in = MakeReorder(d.weights, e->fwd_pd.weights_desc(), engine()));
      DNNL_RETURN_IF_ERROR(e->dst_out = MakeReorder(e->fwd_pd.dst_desc(), d.dst, engine()));
      return absl::OkStatus();
    });
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    const ConvDescs& d = e->d;
    DNNL_RETURN_IF_ERROR(e->bwd_data_pd = BackwardDataDesc(*e));
    DNNL_RETURN_IF_ERROR(e->bwd_data = BwdData(e->bwd_data_pd));
    DNNL_RETURN_IF_ERROR(e->ddst_in_d =
                             MakeReorder(d.dst, e->bwd_data_pd.diff_dst_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->wei_in_d =
                             MakeReorder(d.weights, e->bwd_data_pd.weights_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->dsrc_out =
                             MakeReorder(e->bwd_data_pd.diff_src_desc(), d.src, engine()));
    DNNL_RETURN_IF_ERROR(e->bwd_weights_pd = BackwardWeightsDesc(*e));
    DNNL_RETURN_IF_ERROR(e->bwd_weights = BwdWeights(e->bwd_weights_pd));
    DNNL_RETURN_IF_ERROR(e->src_in_w = MakeReorder(d.src, e->bwd_weights_pd.src_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->ddst_in_w =
                             MakeReorder(d.dst, e->bwd_weights_pd.diff_dst_desc(), engine()));
    DNNL_RETURN_IF_ERROR(
        e->dwei_out = MakeReorder(e->bwd_weights_pd.diff_weights_desc(), d.weights, engine()));
    e->has_backward = true;
    return absl::OkStatus();
  }

  // Inputs with at most this many channels may stay NCHW under kAvoidChannelPadding.
  static constexpr int64_t kFewInputChannels = 4;

  const dnnl::algorithm alg_;
  const bool no_bias_;
  const ConvLayoutPolicy policy_;
  const DescFn descs_;
  PrimitiveCache<std::string, Entry> cache_;
  SavedSource saved_;
};

}  // namespace tessera::ops::nn

#endif  // TESSERA_OPS_NN_CONV_OP_H_

// ConvOp: the CPU Operator behind Convolution and Deconvolution, whose oneDNN primitives
// (forward, backward data, backward weights) take the same descriptors. The property
// computes the descriptors for a data shape (DescFn); the operator caches the primitives
// per data shape and RunContext::cpu_threads. oneDNN fixes a primitive's threads when it is
// created, so each entry is created and run under its own thread count (ThreadsForWork).
// Thread-compatible like every Operator.
#ifndef TESSERA_OPS_NN_CONV_OP_H_
#define TESSERA_OPS_NN_CONV_OP_H_

#include <algorithm>
#include <cstring>
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
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "dnnl.hpp"
#include "engine/omp_threads.h"
#include "ops/nn/conv_autotune.h"
#include "ops/nn/dnnl_util.h"
#include "spdlog/spdlog.h"

namespace tessera::ops::nn {

// The layouts ConvOp runs its primitives in (its TBlobs are plain either way).
enum class ConvLayoutPolicy {
  // oneDNN's own choice (format_tag::any): channel-blocked nChw16c on AVX-512, where it
  // runs about twice as fast as on plain NCHW.
  kOneDnn,
  // oneDNN's choice unless that pads the channels of the source or destination (blocks of
  // 16 over 20 or 50 channels move 1.3-1.6x the bytes, over 1-4 channels up to 16x): then,
  // for a float32 input of at most 4 channels (a first layer), a plain NCHW source where
  // oneDNN's forward and weight-gradient kernels read it directly (AVX-512: LeNet's 1->20
  // step 2.4 ms against NHWC's 4.8); else NHWC, or where NHWC lacks a jit kernel and the
  // input has few channels, the plain source all the same. On AVX2 the plain source's weight
  // gradient is the gemm one (LeNet's 1->20: 4.4 ms against NHWC's 0.8), so NHWC is chosen
  // there. A rule of the kernels a machine has, so every run of one machine chooses alike
  // (timing is opt-in: conv_autotune.h). README's table has the measurements.
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
      : alg_(alg),
        no_bias_(no_bias),
        policy_(policy),
        by_timing_(ConvAutotuneByTiming()),
        descs_(std::move(descs)) {}

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
  // oneDNN's convolutions through an im2col copy and a matrix product ("x64:gemm:jit").
  template <typename PrimitiveDesc>
  static bool IsGemm(const PrimitiveDesc& pd) {
    return std::string(pd.impl_info_str()).find("gemm") != std::string::npos;
  }

  // Whether every direction has a jit kernel with src / dst in `src_md` / `dst_md` (and, with
  // `without_gemm`, the forward and the weight gradient a direct one, not oneDNN's gemm-based
  // one); if so, e->fwd_pd and e->src_md / dst_md become those. Throws nothing.
  bool TryLayouts(Entry* e, const dnnl::memory::desc& src_md, const dnnl::memory::desc& dst_md,
                  bool without_gemm = false) const {
    Entry candidate;
    candidate.d = e->d;
    candidate.src_md = src_md;
    candidate.dst_md = dst_md;
    try {
      candidate.fwd_pd = ForwardDesc(e->d, src_md, dst_md);
      // The backward primitives are built later, in EnsureBackward, from the same layouts.
      const auto weights_pd = BackwardWeightsDesc(candidate);
      if (IsReference(candidate.fwd_pd) || IsReference(BackwardDataDesc(candidate)) ||
          IsReference(weights_pd)) {
        return false;
      }
      if (without_gemm && (IsGemm(candidate.fwd_pd) || IsGemm(weights_pd))) return false;
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
    const bool few_inputs = d.src.dims()[1] <= kFewInputChannels;
    if (few_inputs && d.src.data_type() == dnnl::memory::data_type::f32 &&
        TryLayouts(e, d.src, Any(d.dst), /*without_gemm=*/true)) {
      return;
    }
    if (TryLayouts(e, WithTag(d.src, tag::nhwc), WithTag(d.dst, tag::nhwc))) return;
    if (few_inputs) TryLayouts(e, d.src, Any(d.dst));
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
      if (by_timing_ && d.src.data_type() == dnnl::memory::data_type::f32) {
        RETURN_IF_ERROR(ChooseLayoutsByTiming(e));
        if (e->fwd) return absl::OkStatus();
      }
      DNNL_RETURN_IF_ERROR(ChooseLayouts(e));
      return BuildForward(e);
    });
  }

  // The forward primitive and its reorders, for e->fwd_pd.
  absl::Status BuildForward(Entry* e) const {
    const ConvDescs& d = e->d;
    DNNL_RETURN_IF_ERROR(e->fwd = Fwd(e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->src_in = MakeReorder(d.src, e->fwd_pd.src_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->wei_in = MakeReorder(d.weights, e->fwd_pd.weights_desc(), engine()));
    DNNL_RETURN_IF_ERROR(e->dst_out = MakeReorder(e->fwd_pd.dst_desc(), d.dst, engine()));
    return absl::OkStatus();
  }

  // conv_autotune.h: the layouts whose whole step (forward and both backward directions, with
  // the reorders from and to the plain tensors) is fastest, of oneDNN's choice, NHWC and, for
  // few input channels, a plain NCHW source; each with a jit kernel in every direction is
  // timed once per shape and thread count in this process. Leaves e->fwd empty when none
  // qualifies (the rule then chooses).
  absl::Status ChooseLayoutsByTiming(Entry* e) {
    const ConvDescs d = e->d;
    using tag = dnnl::memory::format_tag;
    struct Candidate {
      const char* name;
      dnnl::memory::desc src, dst;
    };
    std::vector<Candidate> candidates = {{"onednn", Any(d.src), Any(d.dst)}};
    if (d.weights.dims().size() == 4) {  // grouped convolutions keep oneDNN's choice
      candidates.push_back({"nhwc", WithTag(d.src, tag::nhwc), WithTag(d.dst, tag::nhwc)});
      if (d.src.dims()[1] <= kFewInputChannels) candidates.push_back({"nchw_src", d.src, Any(d.dst)});
    }
    const std::string key = LayoutKey(*e);
    const std::optional<std::string> cached = CachedConvLayouts(key);
    std::vector<std::string> timings;
    std::string chosen_name;
    double best = 0;
    for (const Candidate& c : candidates) {
      if (cached.has_value() && *cached != c.name) continue;
      Entry trial;
      trial.d = d;
      trial.threads = e->threads;
      if (!TryLayouts(&trial, c.src, c.dst)) continue;
      RETURN_IF_ERROR(BuildForward(&trial));
      RETURN_IF_ERROR(EnsureBackward(&trial));
      double seconds = 0;
      if (!cached.has_value()) {
        ASSIGN_OR_RETURN(seconds, TimeStep(trial));
        timings.push_back(absl::StrFormat("%s %.3f ms", c.name, seconds * 1e3));
      }
      if (chosen_name.empty() || seconds < best) {
        best = seconds;
        chosen_name = c.name;
        *e = std::move(trial);
      }
    }
    if (!chosen_name.empty() && !cached.has_value()) {
      CacheConvLayouts(key, chosen_name);
      spdlog::info("{} {}: layouts by timing (TESSERA_CONV_AUTOTUNE): {}; chose {}",
                   alg_ == dnnl::algorithm::deconvolution_direct ? "Deconvolution" : "Convolution",
                   key, absl::StrJoin(timings, ", "), chosen_name);
    }
    return absl::OkStatus();
  }

  // What a layout choice depends on: the operation, its shapes and geometry, the type and
  // the threads.
  std::string LayoutKey(const Entry& e) const {
    const ConvDescs& d = e.d;
    auto dims = [](const dnnl::memory::dims& v) { return absl::StrJoin(v, "x"); };
    return absl::StrCat(alg_ == dnnl::algorithm::deconvolution_direct ? "deconv" : "conv",
                        " src ", dims(d.src.dims()), " weights ", dims(d.weights.dims()),
                        no_bias_ ? " no_bias" : "", " stride ", dims(d.strides), " dilate ",
                        dims(d.dilates), " pad ", dims(d.pad_l), "/", dims(d.pad_r), " threads ",
                        e.threads);
  }

  // One training step of `t` on scratch tensors (zeros): the reorders from the plain
  // tensors, forward, backward data, backward weights, the reorders back; the best of three.
  absl::StatusOr<double> TimeStep(Entry& t) {
    try {
      const dnnl::engine& eng = engine();
      auto zeros = [&](const dnnl::memory::desc& md) {
        dnnl::memory m(md, eng);
        if (md.get_size() > 0) std::memset(m.get_data_handle(), 0, md.get_size());
        return m;
      };
      const ConvDescs& d = t.d;
      dnnl::memory src = zeros(d.src), wei = zeros(d.weights), dst = zeros(d.dst),
                   dsrc = zeros(d.src), dwei = zeros(d.weights);
      dnnl::memory bias = no_bias_ ? dnnl::memory() : zeros(d.bias);
      dnnl::memory dbias = no_bias_ ? dnnl::memory() : zeros(d.bias);
      auto side = [&](const Reorder& r, const dnnl::memory& user, bool into) {
        return r.needed ? zeros(into ? r.to : r.from) : user;
      };
      dnnl::memory src_f = side(t.src_in, src, true), wei_f = side(t.wei_in, wei, true),
                   dst_f = side(t.dst_out, dst, false);
      dnnl::memory ddst_d = side(t.ddst_in_d, dst, true), wei_d = side(t.wei_in_d, wei, true),
                   dsrc_b = side(t.dsrc_out, dsrc, false);
      dnnl::memory src_w = side(t.src_in_w, src, true), ddst_w = side(t.ddst_in_w, dst, true),
                   dwei_b = side(t.dwei_out, dwei, false);
      dnnl::memory sp_f = zeros(t.fwd_pd.scratchpad_desc()),
                   sp_d = zeros(t.bwd_data_pd.scratchpad_desc()),
                   sp_w = zeros(t.bwd_weights_pd.scratchpad_desc());
      auto reorder = [&](const Reorder& r, dnnl::memory& from, dnnl::memory& to) {
        if (r.needed) r.prim.execute(stream(), from, to);
      };
      auto step = [&] {
        reorder(t.src_in, src, src_f);
        reorder(t.wei_in, wei, wei_f);
        std::unordered_map<int, dnnl::memory> fwd = {
            {DNNL_ARG_SRC, src_f}, {DNNL_ARG_WEIGHTS, wei_f}, {DNNL_ARG_DST, dst_f},
            {DNNL_ARG_SCRATCHPAD, sp_f}};
        if (!no_bias_) fwd.insert({DNNL_ARG_BIAS, bias});
        t.fwd.execute(stream(), fwd);
        reorder(t.dst_out, dst_f, dst);
        reorder(t.ddst_in_d, dst, ddst_d);
        reorder(t.wei_in_d, wei, wei_d);
        t.bwd_data.execute(stream(), {{DNNL_ARG_DIFF_DST, ddst_d}, {DNNL_ARG_WEIGHTS, wei_d},
                                      {DNNL_ARG_DIFF_SRC, dsrc_b}, {DNNL_ARG_SCRATCHPAD, sp_d}});
        reorder(t.dsrc_out, dsrc_b, dsrc);
        // The weight gradient reads the source the forward reordered, when the layouts agree
        // (SavedSource), and shares the data gradient's diff_dst when those agree.
        const bool saved = t.src_in_w.needed && t.src_in.needed && t.src_in_w.to == t.src_in.to;
        if (!saved) reorder(t.src_in_w, src, src_w);
        const bool shared = t.ddst_in_d.needed && t.ddst_in_w.needed && t.ddst_in_d.to == t.ddst_in_w.to;
        if (!shared) reorder(t.ddst_in_w, dst, ddst_w);
        std::unordered_map<int, dnnl::memory> bwd = {
            {DNNL_ARG_DIFF_DST, shared ? ddst_d : ddst_w}, {DNNL_ARG_SRC, saved ? src_f : src_w},
            {DNNL_ARG_DIFF_WEIGHTS, dwei_b}, {DNNL_ARG_SCRATCHPAD, sp_w}};
        if (!no_bias_) bwd.insert({DNNL_ARG_DIFF_BIAS, dbias});
        t.bwd_weights.execute(stream(), bwd);
        reorder(t.dwei_out, dwei_b, dwei);
      };
      return BestSeconds(step, stream(), 3);
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("timing a convolution's layouts: oneDNN: ", e.what()));
    }
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
  const bool by_timing_;  // TESSERA_CONV_AUTOTUNE when the operator was made
  const DescFn descs_;
  PrimitiveCache<std::string, Entry> cache_;
  SavedSource saved_;
};

}  // namespace tessera::ops::nn

#endif  // TESSERA_OPS_NN_CONV_OP_H_

// BatchNorm (MXNet) over the channel axis (`axis`, default 1):
// out = gamma * (x - mean) / sqrt(var + eps) + beta.
// Arguments data, gamma, beta; auxiliary states moving_mean, moving_var; outputs output and
// the hidden mean and var that Backward reads (visible with output_mean_var).
//
// Training (is_train and not use_global_stats) normalizes with the batch statistics
// (biased variance), writes them to the mean/var outputs and updates the moving ones:
// moving = moving * momentum + batch * (1 - momentum). Otherwise the moving statistics are
// used and copied to the mean/var outputs. fix_gamma uses gamma = 1 and gives gamma a zero
// gradient, as MXNet. CPU kernel: oneDNN batch normalization (oneDNN 2.6's backward also
// wants the shift argument, so Backward passes beta though the gradient does not use it).
// Another channel axis is the same memory as (outer, C, inner, 1) with the channels at
// axis 1, so oneDNN sees that view.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/omp_threads.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

// MXNet 1.9's BatchNormParam (src/operator/nn/batch_norm-inl.h), all 9 fields: eps,
// momentum, fix_gamma, use_global_stats, output_mean_var, axis, cudnn_off, min_calib_range,
// max_calib_range. Implemented but for cudnn_off and the calibration ranges, which only
// MXNet's quantized BatchNorm reads: accepted and ignored.
struct BatchNormParam {
  double eps = 1e-3;
  float momentum = 0.9f;
  bool fix_gamma = true;
  bool use_global_stats = false;
  bool output_mean_var = false;
  bool cudnn_off = false;  // MXNet backend selection; unused
  int axis = 1;
  // Kept (not just dropped) so a symbol file written back carries them for MXNet.
  std::optional<float> min_calib_range;
  std::optional<float> max_calib_range;
  static const ParamSchema<BatchNormParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<BatchNormParam>("BatchNorm");
      s->Field("eps", &BatchNormParam::eps).Lower(0).Describe("added to the variance");
      s->Field("momentum", &BatchNormParam::momentum)
          .Range(0, 1)
          .Describe("of the moving averages");
      s->Field("fix_gamma", &BatchNormParam::fix_gamma).Describe("treat gamma as 1 (no gradient)");
      s->Field("use_global_stats", &BatchNormParam::use_global_stats)
          .Describe("normalize with the moving statistics in training too");
      s->Field("output_mean_var", &BatchNormParam::output_mean_var)
          .Describe("make the mean and var outputs visible");
      s->Field("cudnn_off", &BatchNormParam::cudnn_off)
          .Describe("accepted for MXNet compatibility; ignored");
      s->Field("axis", &BatchNormParam::axis)
          .Describe("the channel axis; negative from the end (default 1)");
      s->Field("min_calib_range", &BatchNormParam::min_calib_range)
          .Describe("MXNet's quantized BatchNorm's calibration; ignored (float BatchNorm)");
      s->Field("max_calib_range", &BatchNormParam::max_calib_range)
          .Describe("MXNet's quantized BatchNorm's calibration; ignored (float BatchNorm)");
      return s;
    }();
    return *schema;
  }
};

enum { kData, kGamma, kBeta };

// The length of the channel axis (already checked by InferShape).
int64_t Channels(const BatchNormParam& p, const Shape& data) {
  return data[p.axis < 0 ? p.axis + data.ndim() : p.axis];
}
enum { kOut, kMean, kVar };
enum { kMovingMean, kMovingVar };

class BatchNormOp : public DnnlOperator {
 public:
  explicit BatchNormOp(BatchNormParam param) : param_(param) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>& aux) override {
    const bool batch_stats = ctx.is_train && !param_.use_global_stats;
    const int64_t channels = Channels(param_, in[kData].shape);
    const int threads = MemoryBoundThreads(ctx, in[kData].Size());
    engine::ScopedOmpThreads omp(threads);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kData].shape, threads, &e));
    if (batch_stats && req[kOut] == OpReqType::kNullOp) {
      return ForwardStatsOnly(ctx, in, req, out, aux, e);
    }
    if (!batch_stats) {
      // Normalize with the moving statistics, and pass them on as the mean / var outputs.
      StoreFloats(static_cast<const float*>(aux[kMovingMean].dptr),
                  static_cast<float*>(out[kMean].dptr), channels, req[kMean]);
      StoreFloats(static_cast<const float*>(aux[kMovingVar].dptr),
                  static_cast<float*>(out[kVar].dptr), channels, req[kVar]);
      if (req[kOut] == OpReqType::kNullOp) return absl::OkStatus();
    }
    const auto& pd = batch_stats ? e->train_pd : e->global_pd;
    CallBuffers buf;
    const int dst = buf.Output(out[kOut], req[kOut]);
    // Batch statistics always go to scratch first: the moving averages need them whatever
    // the req of the mean / var outputs.
    const int mean = batch_stats ? buf.Scratch(channels * sizeof(float)) : -1;
    const int var = batch_stats ? buf.Scratch(channels * sizeof(float)) : -1;
    const int ones = param_.fix_gamma ? buf.Scratch(channels * sizeof(float)) : -1;
    const int sp = buf.Scratch(pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    const TBlob stat_mean =
        batch_stats ? TBlob(buf.ptr(mean), Shape{channels}, DType::kFloat32) : aux[kMovingMean];
    const TBlob stat_var =
        batch_stats ? TBlob(buf.ptr(var), Shape{channels}, DType::kFloat32) : aux[kMovingVar];
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, BlobMemory(in[kData], e->data_md, engine())},
        {DNNL_ARG_DST, buf.Memory(dst, e->data_md, engine())},
        {DNNL_ARG_MEAN, BlobMemory(stat_mean, e->stat_md, engine())},
        {DNNL_ARG_VARIANCE, BlobMemory(stat_var, e->stat_md, engine())},
        {DNNL_ARG_SCALE, ScaleMemory(buf, ones, in[kGamma], e)},
        {DNNL_ARG_SHIFT, BlobMemory(in[kBeta], e->stat_md, engine())}};
    AddScratchpad(buf, sp, pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR((batch_stats ? e->train : e->global).execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    if (batch_stats) {
      StoreFloats(buf.fptr(mean), static_cast<float*>(out[kMean].dptr), channels, req[kMean]);
      StoreFloats(buf.fptr(var), static_cast<float*>(out[kVar].dptr), channels, req[kVar]);
      UpdateMoving(stat_mean, stat_var, aux);
    }
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (AllNull(req)) return absl::OkStatus();
    const int64_t channels = Channels(param_, in[kData].shape);
    const int threads = MemoryBoundThreads(ctx, in[kData].Size());
    engine::ScopedOmpThreads omp(threads);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[kData].shape, threads, &e));
    RETURN_IF_ERROR(EnsureBackward(e));
    CallBuffers buf;
    const int dsrc = buf.Output(in_grad[kData], req[kData]);
    const int dgamma = buf.Scratch(channels * sizeof(float));
    const int dbeta = buf.Output(in_grad[kBeta], req[kBeta]);
    const int ones = param_.fix_gamma ? buf.Scratch(channels * sizeof(float)) : -1;
    const int sp = buf.Scratch(e->bwd_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    // out[kMean] / out[kVar] hold what Forward normalized with (batch or moving statistics).
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, BlobMemory(in[kData], e->data_md, engine())},
        {DNNL_ARG_MEAN, BlobMemory(out[kMean], e->stat_md, engine())},
        {DNNL_ARG_VARIANCE, BlobMemory(out[kVar], e->stat_md, engine())},
        {DNNL_ARG_DIFF_DST, BlobMemory(out_grad[kOut], e->data_md, engine())},
        {DNNL_ARG_SCALE, ScaleMemory(buf, ones, in[kGamma], e)},
        {DNNL_ARG_SHIFT, BlobMemory(in[kBeta], e->stat_md, engine())},
        {DNNL_ARG_DIFF_SRC, buf.Memory(dsrc, e->data_md, engine())},
        {DNNL_ARG_DIFF_SCALE, buf.Memory(dgamma, e->stat_md, engine())},
        {DNNL_ARG_DIFF_SHIFT, buf.Memory(dbeta, e->stat_md, engine())}};
    AddScratchpad(buf, sp, e->bwd_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->bwd.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    buf.Finish();
    float* gamma_grad = static_cast<float*>(in_grad[kGamma].dptr);
    for (int64_t c = 0; c < channels; ++c) {
      // A fixed gamma is a constant: its gradient is zero, as in MXNet.
      Assign(gamma_grad + c, req[kGamma], param_.fix_gamma ? 0.0f : buf.fptr(dgamma)[c]);
    }
    return absl::OkStatus();
  }

 private:
  struct Entry {
    dnnl::memory::desc data_md, stat_md;
    dnnl::batch_normalization_forward::primitive_desc train_pd, global_pd;
    dnnl::batch_normalization_forward train, global;
    bool has_backward = false;
    dnnl::batch_normalization_backward::primitive_desc bwd_pd;
    dnnl::batch_normalization_backward bwd;
  };

  dnnl::normalization_flags Flags(bool global) const {
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    if (global) flags = flags | dnnl::normalization_flags::use_global_stats;
    return flags;
  }

  // gamma, or ones in slot `ones` under fix_gamma.
  dnnl::memory ScaleMemory(const CallBuffers& buf, int ones, const TBlob& gamma, const Entry* e) {
    if (ones < 0) return BlobMemory(gamma, e->stat_md, engine());
    float* p = buf.fptr(ones);
    std::fill(p, p + gamma.Size(), 1.0f);
    return buf.Memory(ones, e->stat_md, engine());
  }

  // Training with kNullOp on the output: statistics still count (moving averages).
  absl::Status ForwardStatsOnly(const OpContext& ctx, const std::vector<TBlob>& in,
                                const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                                const std::vector<TBlob>& aux, Entry* e) {
    const int64_t channels = Channels(param_, in[kData].shape);
    CallBuffers buf;
    const int dst = buf.Scratch(in[kData].Bytes());
    const int mean = buf.Scratch(channels * sizeof(float));
    const int var = buf.Scratch(channels * sizeof(float));
    const int ones = param_.fix_gamma ? buf.Scratch(channels * sizeof(float)) : -1;
    const int sp = buf.Scratch(e->train_pd.scratchpad_desc().get_size());
    RETURN_IF_ERROR(buf.Allocate(ctx));
    const TBlob stat_mean(buf.ptr(mean), Shape{channels}, DType::kFloat32);
    const TBlob stat_var(buf.ptr(var), Shape{channels}, DType::kFloat32);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, BlobMemory(in[kData], e->data_md, engine())},
        {DNNL_ARG_DST, buf.Memory(dst, e->data_md, engine())},
        {DNNL_ARG_MEAN, BlobMemory(stat_mean, e->stat_md, engine())},
        {DNNL_ARG_VARIANCE, BlobMemory(stat_var, e->stat_md, engine())},
        {DNNL_ARG_SCALE, ScaleMemory(buf, ones, in[kGamma], e)},
        {DNNL_ARG_SHIFT, BlobMemory(in[kBeta], e->stat_md, engine())}};
    AddScratchpad(buf, sp, e->train_pd.scratchpad_desc(), engine(), &args);
    DNNL_RETURN_IF_ERROR(e->train.execute(stream(), args));
    DNNL_RETURN_IF_ERROR(stream().wait());
    StoreFloats(buf.fptr(mean), static_cast<float*>(out[kMean].dptr), channels, req[kMean]);
    StoreFloats(buf.fptr(var), static_cast<float*>(out[kVar].dptr), channels, req[kVar]);
    UpdateMoving(stat_mean, stat_var, aux);
    return absl::OkStatus();
  }

  void UpdateMoving(const TBlob& mean, const TBlob& var, const std::vector<TBlob>& aux) const {
    const float m = param_.momentum;
    const float* bm = static_cast<const float*>(mean.dptr);
    const float* bv = static_cast<const float*>(var.dptr);
    float* mm = static_cast<float*>(aux[kMovingMean].dptr);
    float* mv = static_cast<float*>(aux[kMovingVar].dptr);
    for (int64_t c = 0; c < mean.Size(); ++c) {
      mm[c] = mm[c] * m + bm[c] * (1 - m);
      mv[c] = mv[c] * m + bv[c] * (1 - m);
    }
  }

  // Per data shape and threads (MemoryBoundThreads).
  absl::Status GetEntry(const Shape& data, int threads, Entry** out) {
    return cache_.Get({data.ToString(), threads}, out, [&](Entry* e) -> absl::Status {
      // oneDNN's optimized kernels take 2-D to 5-D data as it is (its reference kernel is the
      // one left for a collapsed 3-D view), so view as 4-D only beyond 5-D or for another axis.
      const int axis = param_.axis < 0 ? param_.axis + data.ndim() : param_.axis;
      e->data_md = axis == 1 && data.ndim() <= 5
                       ? PlainDesc(data)
                       : PlainDesc(dnnl::memory::dims{data.ProdRange(0, axis), data[axis],
                                                      data.ProdRange(axis + 1, data.ndim()), 1});
      e->stat_md = PlainDesc(dnnl::memory::dims{data[axis]});
      const float eps = static_cast<float>(param_.eps);
      DNNL_RETURN_IF_ERROR(
          e->train_pd = dnnl::batch_normalization_forward::primitive_desc(
              dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, e->data_md,
                                                      eps, Flags(false)),
              UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->train = dnnl::batch_normalization_forward(e->train_pd));
      // forward_training (not inference) so that it can also hint the backward primitive.
      DNNL_RETURN_IF_ERROR(e->global_pd = dnnl::batch_normalization_forward::primitive_desc(
                               dnnl::batch_normalization_forward::desc(
                                   dnnl::prop_kind::forward_training, e->data_md, eps, Flags(true)),
                               UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->global = dnnl::batch_normalization_forward(e->global_pd));
      return absl::OkStatus();
    });
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    const bool global = param_.use_global_stats;
    DNNL_RETURN_IF_ERROR(e->bwd_pd = dnnl::batch_normalization_backward::primitive_desc(
                             dnnl::batch_normalization_backward::desc(
                                 dnnl::prop_kind::backward, e->data_md, e->data_md,
                                 static_cast<float>(param_.eps), Flags(global)),
                             UserScratchpadAttr(), engine(), global ? e->global_pd : e->train_pd));
    DNNL_RETURN_IF_ERROR(e->bwd = dnnl::batch_normalization_backward(e->bwd_pd));
    e->has_backward = true;
    return absl::OkStatus();
  }

  const BatchNormParam param_;
  PrimitiveCache<std::pair<std::string, int>, Entry> cache_;
};

class BatchNormProp : public DnnlProperty<BatchNormProp, BatchNormParam, BatchNormOp> {
 public:
  std::vector<std::string> ListArguments() const override { return {"data", "gamma", "beta"}; }
  std::vector<std::string> ListOutputs() const override { return {"output", "mean", "var"}; }
  std::vector<std::string> ListAuxiliaryStates() const override {
    return {"moving_mean", "moving_var"};
  }
  int NumVisibleOutputs() const override { return param_.output_mean_var ? 3 : 1; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>* aux) const override {
    const Shape& data = (*in)[kData];
    if (!data.is_known()) return false;
    if (data.ndim() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("BatchNorm: argument 'data' needs at least 2 dimensions (N, C, ...), got ",
                       data.ToString()));
    }
    if (param_.axis < -data.ndim() || param_.axis >= data.ndim()) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNorm: axis ", param_.axis,
                                                     " is out of range for argument 'data' ",
                                                     data.ToString()));
    }
    const Shape channels{Channels(param_, data)};
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kGamma, channels, in));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, kBeta, channels, in));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, kOut, data, out));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, kMean, channels, out));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, kVar, channels, out));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kAux, kMovingMean, channels, aux));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kAux, kMovingVar, channels, aux));
    return true;
  }
  // As MXNet: out_grad, data, gamma, beta and the saved mean / var (not the output).
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[kOut], in_data[kData],  in_data[kGamma],
            in_data[kBeta], out_data[kMean], out_data[kVar]};
  }
  std::string TypeString() const override { return "BatchNorm"; }
};

TESSERA_REGISTER_OP_PROPERTY(BatchNorm, BatchNormProp)
    .Describe("Batch normalization over the channel axis (default 1) with moving statistics "
              "(oneDNN).")
    .AddParams<BatchNormParam>();

}  // namespace
}  // namespace tessera::ops::nn

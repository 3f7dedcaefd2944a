// softmax and log_softmax (MXNet) along one axis (default the last). CPU kernel: oneDNN
// softmax / logsoftmax on a 3-D (outer, axis, inner) view of the data, so any rank works
// and the primitives depend only on those three numbers. Backward reads out_grad and the
// output, as MXNet declares; forward may run in place.
//
// `temperature` T (MXNet's, default 1) normalizes x / T: RunSrcToDst stages the scaled input
// in temp space, RunDstBackward scales the gradient by 1 / T.
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/omp_threads.h"
#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"

namespace tessera::ops::nn {
namespace {

// MXNet 1.9's SoftmaxParam (src/operator/nn/softmax-inl.h; log_softmax shares it), all 4
// fields: axis, temperature, dtype, use_length. axis and temperature are implemented (an
// unset temperature, None, is 1). The kernels take and give float32 only, so dtype is
// accepted as None or float32 and refused otherwise; use_length (a second input of
// lengths masking the data) is refused when true.
struct SoftmaxParam {
  int axis = -1;
  double temperature = 1;
  std::string dtype = "None";
  bool use_length = false;
};

// One schema per operator, so that errors name softmax or log_softmax.
template <bool kLog>
struct SoftmaxParamFor : SoftmaxParam {
  static const ParamSchema<SoftmaxParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<SoftmaxParam>(kLog ? "log_softmax" : "softmax");
      s->Field("axis", &SoftmaxParam::axis)
          .Describe("the axis to normalize over; negative from the end");
      s->Field("temperature", &SoftmaxParam::temperature)
          .Describe("divides the input before normalizing (> 0; default 1)");
      s->Field("dtype", &SoftmaxParam::dtype)
          .Enum({{"None", "None"},
                 {"float16", "float16"},
                 {"float32", "float32"},
                 {"float64", "float64"}})
          .SupportedOnly({"None", "float32"})
          .Describe("type of the output; None: that of the input");
      s->Field("use_length", &SoftmaxParam::use_length)
          .SupportedOnly({false})
          .Describe("take a second input of lengths that masks the data along the axis");
      return s;
    }();
    return *schema;
  }
};

// Fwd/Bwd: dnnl::softmax_* or dnnl::logsoftmax_*.
template <typename Fwd, typename Bwd>
class SoftmaxOp : public DnnlOperator {
 public:
  SoftmaxOp(int axis, double temperature) : axis_(axis), temperature_(temperature) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    const int threads = MemoryBoundThreads(ctx, in[0].Size());
    engine::ScopedOmpThreads omp(threads);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[0].shape, threads, &e));
    return RunSrcToDst(ctx, e->fwd, e->fwd_pd.scratchpad_desc(), e->md, in[0], out[0], req[0],
                       InverseTemperature());
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>&, const std::vector<TBlob>& out_data,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    const int threads = MemoryBoundThreads(ctx, out_data[0].Size());
    engine::ScopedOmpThreads omp(threads);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(out_data[0].shape, threads, &e));
    RETURN_IF_ERROR(EnsureBackward(e));
    return RunDstBackward(ctx, e->bwd, e->bwd_pd.scratchpad_desc(), e->md, out_data[0],
                          out_grad[0], in_grad[0], req[0], InverseTemperature());
  }

 private:
  // softmax(x / T): the input scale, and by the chain rule the gradient's.
  float InverseTemperature() const { return static_cast<float>(1 / temperature_); }

  struct Entry {
    dnnl::memory::desc md;
    typename Fwd::primitive_desc fwd_pd;
    Fwd fwd;
    bool has_backward = false;
    typename Bwd::primitive_desc bwd_pd;
    Bwd bwd;
  };

  // Per softmax view and threads (MemoryBoundThreads).
  absl::Status GetEntry(const Shape& shape, int threads, Entry** out) {
    ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, shape.ndim()));
    const dnnl::memory::dims dims = {shape.ProdRange(0, axis), shape[axis],
                                     shape.ProdRange(axis + 1, shape.ndim())};
    return cache_.Get({dims, threads}, out, [&](Entry* e) -> absl::Status {
      e->md = PlainDesc(dims);
      DNNL_RETURN_IF_ERROR(e->fwd_pd = typename Fwd::primitive_desc(
                               typename Fwd::desc(dnnl::prop_kind::forward_training, e->md, 1),
                               UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->fwd = Fwd(e->fwd_pd));
      return absl::OkStatus();
    });
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    DNNL_RETURN_IF_ERROR(
        e->bwd_pd = typename Bwd::primitive_desc(typename Bwd::desc(e->md, e->md, 1),
                                                 UserScratchpadAttr(), engine(), e->fwd_pd));
    DNNL_RETURN_IF_ERROR(e->bwd = Bwd(e->bwd_pd));
    e->has_backward = true;
    return absl::OkStatus();
  }

  const int axis_;
  const double temperature_;
  PrimitiveCache<std::pair<dnnl::memory::dims, int>, Entry> cache_;
};

template <typename Fwd, typename Bwd, bool kLog>
class SoftmaxProp : public DnnlPropertyBase<SoftmaxProp<Fwd, Bwd, kLog>, SoftmaxParamFor<kLog>> {
  using Base = PropertyWithParam<SoftmaxProp<Fwd, Bwd, kLog>, SoftmaxParamFor<kLog>>;

 public:
  absl::Status Init(const KwArgs& kwargs) override {
    RETURN_IF_ERROR(Base::Init(kwargs));
    if (!(this->param_.temperature > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(TypeString(), ": temperature must be > 0, got ",
                                                     this->param_.temperature));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    const Shape& data = (*in)[0];
    if (!data.is_known()) return false;
    absl::StatusOr<int> axis = NormalizeAxis(this->param_.axis, data.ndim());
    if (!axis.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          TypeString(), ": argument 'data' ", data.ToString(), ": ", axis.status().message()));
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, data, out));
    return true;
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>&,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0], out_data[0]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(CheckCpu(*this, ctx));
    return std::unique_ptr<Operator>(
        new SoftmaxOp<Fwd, Bwd>(this->param_.axis, this->param_.temperature));
  }
  std::string TypeString() const override { return kLog ? "log_softmax" : "softmax"; }
};

using SoftmaxOpProp = SoftmaxProp<dnnl::softmax_forward, dnnl::softmax_backward, false>;
using LogSoftmaxOpProp = SoftmaxProp<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward, true>;

TESSERA_REGISTER_OP_PROPERTY(softmax, SoftmaxOpProp)
    .Describe("exp(x / T) / sum(exp(x / T)) along `axis`, T the temperature (oneDNN softmax).")
    .AddParams<SoftmaxParamFor<false>>();
TESSERA_REGISTER_OP_PROPERTY(log_softmax, LogSoftmaxOpProp)
    .Describe("x / T - log(sum(exp(x / T))) along `axis`, T the temperature (oneDNN logsoftmax).")
    .AddParams<SoftmaxParamFor<true>>();

}  // namespace
}  // namespace tessera::ops::nn

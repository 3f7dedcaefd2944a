// Activation (MXNet): relu, sigmoid, tanh, softrelu (log(1 + e^x)) and softsign
// (x / (1 + |x|)) element-wise. CPU kernel: oneDNN eltwise. Backward reads only out_grad and
// the output, as MXNet declares: relu / sigmoid / tanh use oneDNN's *_use_dst_for_bwd
// algorithms; softrelu has none in oneDNN 2.6, so its gradient sigmoid(x) = 1 - exp(-y) is a
// loop over the output. oneDNN 2.6 has no softsign at all: both directions are loops, the
// gradient 1 / (1 + |x|)^2 = (1 - |y|)^2.
// Forward may run in place (data -> output) and backward in place (out_grad -> in_grad).
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

enum class ActType { kRelu, kSigmoid, kTanh, kSoftRelu, kSoftSign };

// MXNet 1.9's ActivationParam (src/operator/nn/activation-inl.h), its one field: act_type,
// all five types implemented.
struct ActivationParam {
  ActType act_type = ActType::kRelu;
  static const ParamSchema<ActivationParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<ActivationParam>("Activation");
      s->Field("act_type", &ActivationParam::act_type)
          .Required()
          .Enum({{"relu", ActType::kRelu},
                 {"sigmoid", ActType::kSigmoid},
                 {"tanh", ActType::kTanh},
                 {"softrelu", ActType::kSoftRelu},
                 {"softsign", ActType::kSoftSign}})
          .Describe("the activation function");
      return s;
    }();
    return *schema;
  }
};

dnnl::algorithm ForwardAlgorithm(ActType t) {
  switch (t) {
    case ActType::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case ActType::kSigmoid:
      return dnnl::algorithm::eltwise_logistic;
    case ActType::kTanh:
      return dnnl::algorithm::eltwise_tanh;
    case ActType::kSoftRelu:
    case ActType::kSoftSign:  // a loop: never asked for
      break;
  }
  return dnnl::algorithm::eltwise_soft_relu;
}

dnnl::algorithm BackwardAlgorithm(ActType t) {
  switch (t) {
    case ActType::kRelu:
      return dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    case ActType::kSigmoid:
      return dnnl::algorithm::eltwise_logistic_use_dst_for_bwd;
    case ActType::kTanh:
      return dnnl::algorithm::eltwise_tanh_use_dst_for_bwd;
    case ActType::kSoftRelu:
    case ActType::kSoftSign:
      break;
  }
  return dnnl::algorithm::undef;  // no oneDNN kernel: a loop
}

class ActivationOp : public DnnlOperator {
 public:
  explicit ActivationOp(ActivationParam param) : param_(param) {}

 protected:
  absl::Status ForwardImpl(const OpContext& ctx, const std::vector<TBlob>& in,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                           const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    if (param_.act_type == ActType::kSoftSign) {
      const float* x = static_cast<const float*>(in[0].dptr);
      float* y = static_cast<float*>(out[0].dptr);
      for (int64_t i = 0, n = in[0].Size(); i < n; ++i) {
        Assign(y + i, req[0], x[i] / (1 + std::abs(x[i])));  // x[i] is read first: in place is fine
      }
      return absl::OkStatus();
    }
    const int threads = MemoryBoundThreads(ctx, in[0].Size());
    engine::ScopedOmpThreads omp(threads);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(in[0].Size(), threads, &e));
    return RunSrcToDst(ctx, e->fwd, e->fwd_pd.scratchpad_desc(), e->md, in[0], out[0], req[0]);
  }

  absl::Status BackwardImpl(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>&, const std::vector<TBlob>& out_data,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    const int64_t n = out_data[0].Size();
    if (param_.act_type == ActType::kSoftRelu) {
      const float* og = static_cast<const float*>(out_grad[0].dptr);
      const float* y = static_cast<const float*>(out_data[0].dptr);
      float* ig = static_cast<float*>(in_grad[0].dptr);
      for (int64_t i = 0; i < n; ++i) Assign(ig + i, req[0], og[i] * -std::expm1(-y[i]));
      return absl::OkStatus();
    }
    if (param_.act_type == ActType::kSoftSign) {
      const float* og = static_cast<const float*>(out_grad[0].dptr);
      const float* y = static_cast<const float*>(out_data[0].dptr);
      float* ig = static_cast<float*>(in_grad[0].dptr);
      for (int64_t i = 0; i < n; ++i) {
        const float d = 1 - std::abs(y[i]);
        Assign(ig + i, req[0], og[i] * d * d);
      }
      return absl::OkStatus();
    }
    const int threads = MemoryBoundThreads(ctx, n);
    engine::ScopedOmpThreads omp(threads);
    Entry* e;
    RETURN_IF_ERROR(GetEntry(n, threads, &e));
    RETURN_IF_ERROR(EnsureBackward(e));
    return RunDstBackward(ctx, e->bwd, e->bwd_pd.scratchpad_desc(), e->md, out_data[0], out_grad[0],
                          in_grad[0], req[0]);
  }

 private:
  // Element-wise, so the primitives depend only on the element count (a 1-D view) and the
  // threads they were created for (MemoryBoundThreads).
  struct Entry {
    dnnl::memory::desc md;
    dnnl::eltwise_forward::primitive_desc fwd_pd;
    dnnl::eltwise_forward fwd;
    bool has_backward = false;
    dnnl::eltwise_backward::primitive_desc bwd_pd;
    dnnl::eltwise_backward bwd;
  };

  absl::Status GetEntry(int64_t n, int threads, Entry** out) {
    return cache_.Get({n, threads}, out, [&](Entry* e) -> absl::Status {
      e->md = PlainDesc(dnnl::memory::dims{n});
      DNNL_RETURN_IF_ERROR(
          e->fwd_pd = dnnl::eltwise_forward::primitive_desc(
              dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                          ForwardAlgorithm(param_.act_type), e->md),
              UserScratchpadAttr(), engine()));
      DNNL_RETURN_IF_ERROR(e->fwd = dnnl::eltwise_forward(e->fwd_pd));
      return absl::OkStatus();
    });
  }

  absl::Status EnsureBackward(Entry* e) {
    if (e->has_backward) return absl::OkStatus();
    const dnnl::algorithm alg = BackwardAlgorithm(param_.act_type);
    dnnl::eltwise_forward::primitive_desc hint;
    DNNL_RETURN_IF_ERROR(
        hint = dnnl::eltwise_forward::primitive_desc(
            dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, e->md), engine()));
    DNNL_RETURN_IF_ERROR(
        e->bwd_pd = dnnl::eltwise_backward::primitive_desc(
            dnnl::eltwise_backward::desc(alg, e->md, e->md), UserScratchpadAttr(), engine(), hint));
    DNNL_RETURN_IF_ERROR(e->bwd = dnnl::eltwise_backward(e->bwd_pd));
    e->has_backward = true;
    return absl::OkStatus();
  }

  const ActivationParam param_;
  PrimitiveCache<std::pair<int64_t, int>, Entry> cache_;
};

class ActivationProp : public DnnlProperty<ActivationProp, ActivationParam, ActivationOp> {
 public:
  // Mixed precision keeps the products' 16-bit outputs through it (graph/amp.h).
  bool RunsHalfTypes() const override { return true; }
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                  std::vector<Shape>*) const override {
    if ((*in)[0].is_known()) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, (*in)[0], out));
    } else if ((*out)[0].is_known()) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out)[0], in));
    }
    return (*in)[0].is_known();
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
  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>&, const std::vector<int>&,
      const std::vector<int>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }
  std::string TypeString() const override { return "Activation"; }
};

TESSERA_REGISTER_OP_PROPERTY(Activation, ActivationProp)
    .Describe("Element-wise activation: relu, sigmoid, tanh, softrelu or softsign (oneDNN eltwise).")
    .AddParams<ActivationParam>();

}  // namespace
}  // namespace tessera::ops::nn

// Dropout (Srivastava et al. 2014), as MXNet's src/operator/dropout-inl.h: while training
// (or always, with mode='always') each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), so the expected output equals the input and inference is the identity.
//
// The hidden output `mask` holds, per element, the factor the forward applied (0 or
// 1 / (1 - p); 1 when nothing was dropped), so backward is out_grad * mask whatever mode
// produced it. Random bits come from the device's Philox generator (the kRandom resource),
// which makes a run reproducible from the runtime's seed.
//
// `axes` (MXNet's variational dropout): one keep decision is shared along those axes, i.e.
// drawn for the data shape with them set to 1 and broadcast, so e.g. axes=(1,) on (N, T, C)
// drops the same channels at every time step.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/philox.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

using array_internal::MapWithReq;

enum class DropoutMode { kTraining, kAlways };

// MXNet 1.9's DropoutParam (src/operator/nn/dropout-inl.h), all 4 fields: p, mode, axes,
// cudnn_off. Implemented; cudnn_off (an optional bool in MXNet) is ignored.
struct DropoutParam {
  double p = 0.5;  // double so float64 runs scale by exactly 1 / (1 - p)
  DropoutMode mode = DropoutMode::kTraining;
  std::vector<int> axes;   // shared-mask axes; empty: every element drawn on its own
  bool cudnn_off = false;  // MXNet backend selection; unused

  static const ParamSchema<DropoutParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<DropoutParam>("Dropout");
      s->Field("p", &DropoutParam::p).Range(0, 1).Describe("fraction of elements dropped, < 1");
      s->Field("mode", &DropoutParam::mode)
          .Enum({{"training", DropoutMode::kTraining}, {"always", DropoutMode::kAlways}})
          .Describe("drop only while training, or at inference too");
      s->Field("axes", &DropoutParam::axes)
          .Describe("axes along which one keep decision is shared (variational dropout)");
      s->Field("cudnn_off", &DropoutParam::cudnn_off)
          .Describe("accepted for MXNet compatibility; ignored");
      return s;
    }();
    return *schema;
  }
};

class DropoutOp : public Operator {
 public:
  explicit DropoutOp(DropoutParam param) : param_(param) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_data[0].dtype, T, ForwardT<T>(ctx, in_data, req, out_data),
        status = array_internal::UnsupportedDType("Dropout", in_data[0].dtype, true));
    return status;
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_grad[0].dtype, T, BackwardT<T>(out_grad[0], out_data[1], req[0], in_grad[0]),
        status = array_internal::UnsupportedDType("Dropout", in_grad[0].dtype, true));
    return status;
  }

 private:
  template <typename T>
  void ForwardT(const OpContext& ctx, const std::vector<TBlob>& in_data,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data) {
    using A = AccType<T>;
    const T* x = in_data[0].data<T>();
    T* y = out_data[0].data<T>();
    const int64_t n = in_data[0].Size();
    const bool write_mask = req[1] != OpReqType::kNullOp;
    T* mask = write_mask ? out_data[1].data<T>() : nullptr;
    const bool drop = (ctx.is_train || param_.mode == DropoutMode::kAlways) && param_.p > 0;
    if (!drop) {
      array_internal::CopyWithReq(x, y, n, req[0]);
      if (write_mask) {
        for (int64_t i = 0; i < n; ++i) mask[i] = static_cast<T>(A(1));
      }
      return;
    }
    // The keep decisions are drawn first, in one serial pass over the generator, so the
    // stream position after the call depends only on n. Scale kept in AccType so that
    // half-precision storage of the mask does not perturb the forward result.
    const double p = param_.p;
    const A scale = static_cast<A>(1.0 / (1.0 - p));
    std::vector<uint8_t> keep = DrawKeep(in_data[0].shape, p, ctx.requested.at(0).get_random());
    MapWithReq(y, n, req[0],
               [&](int64_t i) { return keep[i] ? static_cast<A>(x[i]) * scale : A(0); });
    if (write_mask) {
      for (int64_t i = 0; i < n; ++i) mask[i] = static_cast<T>(keep[i] ? scale : A(0));
    }
  }

  template <typename T>
  void BackwardT(const TBlob& out_grad, const TBlob& mask_blob, OpReqType req,
                 const TBlob& in_grad) {
    using A = AccType<T>;
    const T* og = out_grad.data<T>();
    const T* mask = mask_blob.data<T>();
    MapWithReq(in_grad.data<T>(), in_grad.Size(), req,
               [&](int64_t i) { return static_cast<A>(og[i]) * static_cast<A>(mask[i]); });
  }

  // One keep flag per element of `shape`, drawn once per element of the shape with `axes`
  // set to 1 and broadcast along them (InferShape checked the axes).
  std::vector<uint8_t> DrawKeep(const Shape& shape, double p, engine::PhiloxRandom* rng) const {
    const int64_t n = shape.Size();
    std::vector<uint8_t> keep(n);
    if (param_.axes.empty()) {
      for (int64_t i = 0; i < n; ++i) keep[i] = rng->NextUniform() >= p;
      return keep;
    }
    const int nd = shape.ndim();
    std::vector<bool> shared(nd, false);
    for (int a : param_.axes) shared[a < 0 ? a + nd : a] = true;
    // Row-major strides of the drawn (reduced) shape, 0 along the shared axes.
    std::vector<int64_t> stride(nd, 0);
    int64_t drawn = 1;
    for (int d = nd - 1; d >= 0; --d) {
      if (shared[d]) continue;
      stride[d] = drawn;
      drawn *= shape[d];
    }
    std::vector<uint8_t> draws(drawn);
    for (int64_t j = 0; j < drawn; ++j) draws[j] = rng->NextUniform() >= p;
    std::vector<int64_t> index(nd, 0);
    int64_t at = 0;  // index into draws for the element at `index`
    for (int64_t i = 0; i < n; ++i) {
      keep[i] = draws[at];
      for (int d = nd - 1; d >= 0; --d) {  // advance the multi-index, last axis fastest
        at += stride[d];
        if (++index[d] < shape[d]) break;
        at -= stride[d] * shape[d];
        index[d] = 0;
      }
    }
    return keep;
  }

  DropoutParam param_;
};

class DropoutProp : public PropertyWithParam<DropoutProp, DropoutParam> {
 public:
  absl::Status Init(const KwArgs& kwargs) override {
    RETURN_IF_ERROR(PropertyWithParam::Init(kwargs));
    if (param_.p >= 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Dropout: invalid value '", param_.p,
          "' for parameter 'p': must be in [0, 1) (p = 1 would drop everything and scale by "
          "infinity)"));
    }
    return absl::OkStatus();
  }

  std::vector<std::string> ListOutputs() const override { return {"output", "mask"}; }
  int NumVisibleOutputs() const override { return 1; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    for (int o = 0; o < 2; ++o) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[o], in_shape));
    }
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    for (int a : param_.axes) {
      if (a < -data.ndim() || a >= data.ndim()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Dropout: axis ", a, " of parameter 'axes' is out of range for argument 'data' ",
            data.ToString()));
      }
    }
    for (int o = 0; o < 2; ++o) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, o, (*in_shape)[0], out_shape));
    }
    return true;
  }

  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>* aux_type) const override {
    return array_internal::InferFloatType(*this, in_type, out_type, aux_type);
  }

  std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>&) const override {
    return {{ResourceRequest::kRandom}};
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0], out_data[1]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>& in_data,
      const std::vector<int>& out_data, const std::vector<int>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(array_internal::CheckCpu("Dropout", ctx));
    return std::make_unique<DropoutOp>(param_);
  }
  std::string TypeString() const override { return "Dropout"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(Dropout, DropoutProp)
    .Describe(
        "Zeroes each element with probability p and scales the rest by 1/(1-p) while "
        "training (or always, mode='always'); the identity otherwise.")
    .AddParams<DropoutParam>();

}  // namespace tessera::ops

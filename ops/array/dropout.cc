// Dropout (Srivastava et al. 2014), as MXNet's src/operator/dropout-inl.h: while training
// (or always, with mode='always') each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), so the expected output equals the input and inference is the identity.
//
// The hidden output `mask` holds, per element, the factor the forward applied (0 or
// 1 / (1 - p); 1 when nothing was dropped), so backward is out_grad * mask whatever mode
// produced it. Random bits come from the device's Philox generator (the kRandom resource),
// which makes a run reproducible from the runtime's seed.
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

struct DropoutParam {
  double p = 0.5;  // double so float64 runs scale by exactly 1 / (1 - p)
  DropoutMode mode = DropoutMode::kTraining;

  static const ParamSchema<DropoutParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<DropoutParam>("Dropout");
      s->Field("p", &DropoutParam::p).Range(0, 1).Describe("fraction of elements dropped, < 1");
      s->Field("mode", &DropoutParam::mode)
          .Enum({{"training", DropoutMode::kTraining}, {"always", DropoutMode::kAlways}})
          .Describe("drop only while training, or at inference too");
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
    std::vector<uint8_t> keep(n);
    engine::PhiloxRandom* rng = ctx.requested.at(0).get_random();
    for (int64_t i = 0; i < n; ++i) keep[i] = rng->NextUniform() >= p;
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
    if (!(*in_shape)[0].is_known()) return false;
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

// Loss heads, as MXNet's src/operator/regression_output-inl.h and make_loss-inl.h. Their
// forward is the prediction (identity, or a sigmoid), and their backward starts the chain
// rule: it ignores out_grad and writes the gradient of the loss itself.
//
//   LinearRegressionOutput    out = data           grad = (out - label) * s
//   LogisticRegressionOutput  out = sigmoid(data)  grad = (out - label) * s
//   MAERegressionOutput       out = data           grad = sign(out - label) * s
//     with s = grad_scale / (label.Size() / label.shape[0]), the mean over the outputs of
//     one example; label's gradient is zero.
//   MakeLoss                  out = data           grad = grad_scale / norm, norm = 1 (null),
//     the batch size data.shape[0] (batch) or the number of outputs > valid_thresh, at
//     least 1 (valid): the data is taken to be a loss already.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

using array_internal::MapWithReq;

enum class RegressionKind { kLinear, kLogistic, kMAE };

// MXNet 1.9's RegressionOutputParam (src/operator/regression_output-inl.h), its one field:
// grad_scale.
struct RegressionOutputParam {
  float grad_scale = 1.0f;

  static const ParamSchema<RegressionOutputParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<RegressionOutputParam>("RegressionOutput");
      s->Field("grad_scale", &RegressionOutputParam::grad_scale)
          .Describe("multiplies the gradient");
      return s;
    }();
    return *schema;
  }
};

template <RegressionKind kKind>
class RegressionOutputOp : public Operator {
 public:
  RegressionOutputOp(RegressionOutputParam param, std::string name)
      : param_(param), name_(std::move(name)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_data[0].dtype, T, ForwardT<T>(in_data[0], req[0], out_data[0]),
        status = array_internal::UnsupportedDType(name_, in_data[0].dtype, true));
    return status;
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_grad[0].dtype, T, BackwardT<T>(in_data[1], out_data[0], req[0], in_grad[0]),
        status = array_internal::UnsupportedDType(name_, in_grad[0].dtype, true));
    array_internal::ZeroBlob(in_grad[1], req[1]);
    return status;
  }

 private:
  template <typename T>
  void ForwardT(const TBlob& data, OpReqType req, const TBlob& out) {
    using A = AccType<T>;
    if constexpr (kKind == RegressionKind::kLogistic) {
      const T* x = data.data<T>();
      MapWithReq(out.data<T>(), out.Size(), req,
                 [&](int64_t i) { return A(1) / (A(1) + std::exp(-static_cast<A>(x[i]))); });
    } else {
      array_internal::CopyWithReq(data.data<T>(), out.data<T>(), out.Size(), req);
    }
  }

  template <typename T>
  void BackwardT(const TBlob& label_blob, const TBlob& out_blob, OpReqType req, const TBlob& grad) {
    using A = AccType<T>;
    const T* label = label_blob.data<T>();
    const T* out = out_blob.data<T>();
    const int64_t per_example = label_blob.Size() / label_blob.shape[0];
    const A scale = static_cast<A>(param_.grad_scale / static_cast<double>(per_example));
    MapWithReq(grad.data<T>(), grad.Size(), req, [&](int64_t i) {
      const A diff = static_cast<A>(out[i]) - static_cast<A>(label[i]);
      if constexpr (kKind == RegressionKind::kMAE) {
        return scale * static_cast<A>((diff > 0) - (diff < 0));
      } else {
        return scale * diff;
      }
    });
  }

  RegressionOutputParam param_;
  std::string name_;
};

template <RegressionKind kKind>
class RegressionOutputProp
    : public PropertyWithParam<RegressionOutputProp<kKind>, RegressionOutputParam> {
 public:
  std::vector<std::string> ListArguments() const override { return {"data", "label"}; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[0], in_shape));
    const Shape& data = (*in_shape)[0];
    if (!data.is_known()) return false;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, data, out_shape));
    Shape& label = (*in_shape)[1];
    if (label.ndim() == 0) {
      label = data;
    } else if (label.is_known() && label != data) {
      // As MXNet, a label of another shape with the same examples and element count is
      // accepted, e.g. (n,) for data (n, 1).
      if (label.Size() != data.Size() || label[0] != data[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat(TypeString(), ": label has shape ", label.ToString(),
                         " but data has shape ", data.ToString(),
                         "; the label needs the data's shape (or its element count and "
                         "first dimension)"));
      }
    } else {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 1, data, in_shape));
    }
    return true;
  }

  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>* aux_type) const override {
    return array_internal::InferFloatType(*this, in_type, out_type, aux_type);
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {in_data[1], out_data[0]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<RegressionOutputOp<kKind>>(this->param_, TypeString());
  }
  std::string TypeString() const override {
    switch (kKind) {
      case RegressionKind::kLinear:
        return "LinearRegressionOutput";
      case RegressionKind::kLogistic:
        return "LogisticRegressionOutput";
      case RegressionKind::kMAE:
        return "MAERegressionOutput";
    }
    return "";
  }
};

using LinearRegressionOutputProp = RegressionOutputProp<RegressionKind::kLinear>;
using LogisticRegressionOutputProp = RegressionOutputProp<RegressionKind::kLogistic>;
using MAERegressionOutputProp = RegressionOutputProp<RegressionKind::kMAE>;

enum class LossNormalization { kNull, kBatch, kValid };

// MXNet 1.9's MakeLossParam (src/operator/make_loss-inl.h), all 3 fields: grad_scale,
// valid_thresh, normalization. All implemented.
struct MakeLossParam {
  float grad_scale = 1.0f;
  LossNormalization normalization = LossNormalization::kNull;
  float valid_thresh = 0.0f;

  static const ParamSchema<MakeLossParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<MakeLossParam>("MakeLoss");
      s->Field("grad_scale", &MakeLossParam::grad_scale).Describe("multiplies the gradient");
      s->Field("normalization", &MakeLossParam::normalization)
          .Enum({{"null", LossNormalization::kNull},
                 {"batch", LossNormalization::kBatch},
                 {"valid", LossNormalization::kValid}})
          .Describe("divide the gradient by 1, the batch size, or the count of valid outputs");
      s->Field("valid_thresh", &MakeLossParam::valid_thresh)
          .Describe("outputs above this count as valid (normalization='valid')");
      return s;
    }();
    return *schema;
  }
};

class MakeLossOp : public Operator {
 public:
  explicit MakeLossOp(MakeLossParam param) : param_(param) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    return array_internal::CopyBlob(in_data[0], out_data[0], req[0], "MakeLoss");
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_FLOAT_TYPE_SWITCH(
        in_grad[0].dtype, T, BackwardT<T>(out_data, req[0], in_grad[0]),
        status = array_internal::UnsupportedDType("MakeLoss", in_grad[0].dtype, true));
    return status;
  }

 private:
  template <typename T>
  void BackwardT(const std::vector<TBlob>& out_data, OpReqType req, const TBlob& grad) {
    using A = AccType<T>;
    double norm = 1;
    if (param_.normalization == LossNormalization::kBatch) {
      norm = static_cast<double>(grad.shape[0]);
    } else if (param_.normalization == LossNormalization::kValid) {
      const T* out = out_data[0].data<T>();
      const A thresh = static_cast<A>(param_.valid_thresh);
      int64_t valid = 0;
      for (int64_t i = 0; i < out_data[0].Size(); ++i) valid += static_cast<A>(out[i]) > thresh;
      norm = static_cast<double>(std::max<int64_t>(valid, 1));
    }
    const A value = static_cast<A>(param_.grad_scale / norm);
    MapWithReq(grad.data<T>(), grad.Size(), req, [&](int64_t) { return value; });
  }

  MakeLossParam param_;
};

class MakeLossProp : public PropertyWithParam<MakeLossProp, MakeLossParam> {
 public:
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[0], in_shape));
    if (!(*in_shape)[0].is_known()) return false;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, (*in_shape)[0], out_shape));
    return true;
  }

  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>* aux_type) const override {
    return array_internal::InferFloatType(*this, in_type, out_type, aux_type);
  }

  // Only 'valid' looks at anything (the output, equal to the input); the others need just
  // the gradient's shape.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    if (param_.normalization == LossNormalization::kValid) return {out_data[0]};
    return {};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<MakeLossOp>(param_);
  }
  std::string TypeString() const override { return "MakeLoss"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(LinearRegressionOutput, LinearRegressionOutputProp)
    .Describe("Identity forward; backward (out - label) * grad_scale / outputs per example.")
    .AddParams<RegressionOutputParam>();
TESSERA_REGISTER_OP_PROPERTY(LogisticRegressionOutput, LogisticRegressionOutputProp)
    .Describe("Sigmoid forward; backward (out - label) * grad_scale / outputs per example.")
    .AddParams<RegressionOutputParam>();
TESSERA_REGISTER_OP_PROPERTY(MAERegressionOutput, MAERegressionOutputProp)
    .Describe("Identity forward; backward sign(out - label) * grad_scale / outputs per example.")
    .AddParams<RegressionOutputParam>();
TESSERA_REGISTER_OP_PROPERTY(MakeLoss, MakeLossProp)
    .Describe("Treats its input as a loss: identity forward, backward grad_scale / norm.")
    .AddParams<MakeLossParam>();

}  // namespace tessera::ops

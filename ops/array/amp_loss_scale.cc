// _amp_loss_scale: dynamic loss scaling's hook in the graph (graph/amp.h puts one before each
// loss operator). Forward it is the identity; backward it multiplies the loss's gradient by
// the scale held in its auxiliary state, which the fused optimizer update adjusts on the
// device (kvstore/fused_update.h), so the scale changes without the host and without
// rebinding. Float types for data; the scale is a (1,) float32 array.
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

class AmpLossScaleOp : public Operator {
 public:
  absl::Status Forward(const OpContext&, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>&) override {
    return array_internal::CopyBlob(in_data[0], out_data[0], req[0], "_amp_loss_scale");
  }
  absl::Status Backward(const OpContext&, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    const float scale = *static_cast<const float*>(aux_states[0].dptr);
    const TBlob& og = out_grad[0];
    const TBlob& ig = in_grad[0];
    TESSERA_FLOAT_TYPE_SWITCH(
        ig.dtype, T,
        {
          const T* g = static_cast<const T*>(og.dptr);
          array_internal::MapWithReq(static_cast<T*>(ig.dptr), ig.Size(), req[0], [&](int64_t i) {
            return static_cast<AccType<T>>(g[i]) * static_cast<AccType<T>>(scale);
          });
        },
        return array_internal::UnsupportedDType("_amp_loss_scale", ig.dtype, true));
    return absl::OkStatus();
  }
};

class AmpLossScaleProp : public PropertyWithParam<AmpLossScaleProp, NoParam> {
 public:
  std::vector<std::string> ListAuxiliaryStates() const override { return {"loss_scale"}; }
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    RETURN_IF_ERROR(AssignShape(*this, Slot::kAux, 0, Shape{1}, aux_shape));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[0], in_shape));
    if (!(*in_shape)[0].is_known()) return false;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, (*in_shape)[0], out_shape));
    return true;
  }
  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>* aux_type) const override {
    if ((*aux_type)[0] != DType::kUnknown && (*aux_type)[0] != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("_amp_loss_scale: the loss scale is ",
                                                     DTypeName((*aux_type)[0]), ", not float32"));
    }
    (*aux_type)[0] = DType::kFloat32;
    std::vector<DType> none;
    return array_internal::InferFloatType(*this, in_type, out_type, &none);
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(array_internal::CheckCpu(TypeString(), ctx));
    return std::make_unique<AmpLossScaleOp>();
  }
  std::string TypeString() const override { return "_amp_loss_scale"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(_amp_loss_scale, AmpLossScaleProp)
    .Describe("Identity forward; backward multiplies the gradient by the loss scale (aux state).");

}  // namespace tessera::ops

// BlockGrad: the identity going forward and a wall going backward (its input's gradient is
// zero), to keep a branch of the graph out of training, as MXNet's BlockGrad. Every dtype.
// No parameters, as in MXNet 1.9 (src/operator/tensor/elemwise_unary_op_basic.cc).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status_macros.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

class BlockGradOp : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    return array_internal::CopyBlob(in_data[0], out_data[0], req[0], "BlockGrad");
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    array_internal::ZeroBlob(in_grad[0], req[0]);
    return absl::OkStatus();
  }
};

class BlockGradProp : public PropertyWithParam<BlockGradProp, NoParam> {
 public:
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[0], in_shape));
    if (!(*in_shape)[0].is_known()) return false;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, (*in_shape)[0], out_shape));
    return true;
  }
  // The gradient is zero whatever happened: backward reads nothing.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<BlockGradOp>();
  }
  std::string TypeString() const override { return "BlockGrad"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(BlockGrad, BlockGradProp)
    .Describe("Identity forward; stops the gradient (zero gradient for its input).")
    .AddAlias("stop_gradient");

}  // namespace tessera::ops

// _amp_loss_scale on the GPU (ops/array/amp_loss_scale.cc): forward a copy, backward the
// gradient times the (1,) scale, broadcast on the device - the scale is never read by the
// host. float32 data, where graph/amp.h puts the node.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/status_macros.h"
#include "ndarray/cuda/device_math.h"
#include "ops/cuda/array_ops_util.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

constexpr char kName[] = "_amp_loss_scale";

class AmpLossScaleGpuOp : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return CopyBlob(kName, in[0], out[0], req[0], StreamOf(ctx));
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckBlobs(kName, {&out_grad[0], &in_grad[0], &aux[0]}, DType::kFloat32));
    return gpu_math::BroadcastBinary(math::BinaryOp::kMul, out_grad[0], aux[0], req[0], in_grad[0],
                                     StreamOf(ctx));
  }
};

const bool kRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty&, Context) {
    return absl::StatusOr<std::unique_ptr<Operator>>(std::make_unique<AmpLossScaleGpuOp>());
  });
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

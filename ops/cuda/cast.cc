// Cast and amp_cast on the GPU (ops/array/cast.cc): one conversion kernel each way;
// kAddTo converts into workspace first and adds in the output's type.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/status_macros.h"
#include "ndarray/cuda/device_math.h"
#include "ops/cuda/array_ops_util.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

class CastGpuOp : public Operator {
 public:
  explicit CastGpuOp(std::string name) : name_(std::move(name)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return CastWithReq(ctx, in[0], out[0], req[0]);
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    return CastWithReq(ctx, out_grad[0], in_grad[0], req[0]);
  }

 private:
  absl::Status CastWithReq(const OpContext& ctx, const TBlob& in, const TBlob& out,
                           OpReqType req) const {
    if (req == OpReqType::kNullOp) return absl::OkStatus();
    if (in.dtype == out.dtype) return CopyBlob(name_, in, out, req, StreamOf(ctx));
    if (req != OpReqType::kAddTo) return gpu_math::Cast(in, out, StreamOf(ctx));
    Workspace workspace(ctx);
    ASSIGN_OR_RETURN(void* space, workspace.Get(out.Bytes()));
    const TBlob converted(space, out.shape, out.dtype, out.ctx);
    RETURN_IF_ERROR(gpu_math::Cast(in, converted, StreamOf(ctx)));
    return CopyBlob(name_, converted, out, req, StreamOf(ctx));
  }

  std::string name_;
};

const bool kRegistered = [] {
  for (const char* name : {"Cast", "amp_cast"}) {
    RegisterGpuOperator(name, [name](const OperatorProperty&, Context) {
      return absl::StatusOr<std::unique_ptr<Operator>>(std::make_unique<CastGpuOp>(name));
    });
  }
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

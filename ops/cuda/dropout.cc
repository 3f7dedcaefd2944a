// Dropout on the GPU (ops/array/dropout.cc's twin): while training, or always with
// mode='always', each element is kept when its Philox draw u satisfies u >= p and scaled by
// 1 / (1 - p); the hidden `mask` output holds the factor applied (0 or 1 / (1 - p), 1 when
// nothing was dropped), and backward is out_grad * mask, so it uses exactly the forward's
// decisions. `axes` shares one decision along those axes: the draws are numbered over the
// data shape with those axes set to 1, row-major, as the CPU draws them.
//
// The draws come from the kRandom resource's generator (random_kernels.h): element i's
// kernel thread computes its own draw from the generator's position, and the host advances
// the generator by the number of draws, so the same generator state gives the CPU's mask.
// float32 and float64; cuDNN's dropout is not used (its random stream is its own), so
// cudnn_off changes nothing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/random_kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

struct DropoutParams {
  double p = 0.5;
  bool always = false;  // mode 'always'
  std::vector<int> axes;
};

absl::StatusOr<KernelType> TypeOf(DType dtype) {
  if (dtype == DType::kFloat32) return KernelType::kFloat32;
  if (dtype == DType::kFloat64) return KernelType::kFloat64;
  return absl::InvalidArgumentError(
      absl::StrCat("Dropout: dtype ", DTypeName(dtype), " has no GPU kernel (float32, float64)"));
}

// Which draw each element of `shape` uses. Runs of adjacent axes that are all shared or all
// drawn merge into one, which keeps any rank within kMaxDims but pathological alternations.
absl::StatusOr<DrawMap> MapFor(const Shape& shape, const std::vector<int>& axes, int64_t* draws) {
  const int nd = shape.ndim();
  std::vector<bool> shared(nd, false);
  for (int a : axes) {
    const int axis = a < 0 ? a + nd : a;
    if (axis < 0 || axis >= nd) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Dropout: axis ", a, " of parameter 'axes' is out of range for ", shape.ToString()));
    }
    shared[axis] = true;
  }
  // Row-major strides of the drawn shape (the shared axes set to 1), 0 along shared axes.
  std::vector<int64_t> stride(nd, 0);
  int64_t drawn = 1;
  for (int d = nd - 1; d >= 0; --d) {
    if (shared[d]) continue;
    stride[d] = drawn;
    drawn *= shape[d];
  }
  DrawMap map;
  map.ndim = 0;
  for (int d = 0; d < nd; ++d) {
    // Two adjacent shared axes have stride 0; two adjacent drawn ones are contiguous in the
    // draws (the outer stride is the inner one times the inner size): either way one axis.
    if (map.ndim > 0 && shared[d] == shared[d - 1]) {
      map.shape[map.ndim - 1] *= shape[d];
      map.draw_stride[map.ndim - 1] = stride[d];
      continue;
    }
    if (map.ndim == kMaxDims) {
      return absl::UnimplementedError(absl::StrCat(
          "Dropout: the shared and drawn axes of ", shape.ToString(),
          " alternate more often than the GPU kernel's ", kMaxDims, " dimensions allow"));
    }
    map.shape[map.ndim] = shape[d];
    map.draw_stride[map.ndim] = stride[d];
    ++map.ndim;
  }
  *draws = drawn;
  return map;
}

class DropoutGpuOp : public Operator {
 public:
  explicit DropoutGpuOp(DropoutParams p) : p_(std::move(p)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(const KernelType type, TypeOf(in[0].dtype));
    const int64_t n = in[0].Size();
    void* mask = req[1] != OpReqType::kNullOp ? out[1].dptr : nullptr;
    const bool drop = (ctx.is_train || p_.always) && p_.p > 0;
    if (!drop) {
      CUDA_RETURN_IF_ERROR(LaunchDropoutIdentity(type, in[0].dptr, out[0].dptr,
                                                 static_cast<int>(req[0]), mask, n, StreamOf(ctx)));
      return absl::OkStatus();
    }
    engine::PhiloxRandom* gen = nullptr;
    for (const Resource& r : ctx.requested) {
      if (r.type == ResourceRequest::kRandom) gen = r.get_random();
    }
    if (gen == nullptr) {
      return absl::FailedPreconditionError(
          "Dropout: called without the kRandom resource its property requests");
    }
    int64_t draws = 0;
    ASSIGN_OR_RETURN(const DrawMap map, MapFor(in[0].shape, p_.axes, &draws));
    // As the CPU: the scale in the element type, 1 / (1 - p) computed in double.
    CUDA_RETURN_IF_ERROR(LaunchDropout(type, in[0].dptr, out[0].dptr, static_cast<int>(req[0]),
                                       mask, n, map, *gen, p_.p, 1.0 / (1.0 - p_.p),
                                       StreamOf(ctx)));
    // The kernel took the generator by value; consume what it drew (even when no output was
    // asked for, as the CPU draws regardless).
    gen->Skip(static_cast<uint64_t>(draws));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(const KernelType type, TypeOf(in_grad[0].dtype));
    CUDA_RETURN_IF_ERROR(LaunchMap(MapCode::kMul, type, out_grad[0].dptr, out[1].dptr, nullptr,
                                   in_grad[0].dptr, in_grad[0].Size(), 0, static_cast<int>(req[0]),
                                   StreamOf(ctx)));
    return absl::OkStatus();
  }

 private:
  const DropoutParams p_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateDropout(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  DropoutParams p;
  RETURN_IF_ERROR(r.Read("p", &p.p));
  RETURN_IF_ERROR(r.Read("axes", &p.axes));
  const std::string mode = r.Get("mode", "training");
  if (mode != "training" && mode != "always") {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: parameter mode='", mode, "' is not 'training' or 'always'"));
  }
  p.always = mode == "always";
  if (!(p.p >= 0 && p.p < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: invalid value '", p.p, "' for parameter 'p': must be in [0, 1)"));
  }
  return std::unique_ptr<Operator>(new DropoutGpuOp(std::move(p)));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Dropout", CreateDropout);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

// The axis reductions (sum, mean, max, min, prod) and the broadcasting binary operators
// (broadcast_add/sub/mul/div/power/maximum/minimum) on the GPU, with the CPU operators'
// semantics (ops/tensor): max/min send the gradient to every position equal to the result,
// broadcast maximum/minimum send ties to lhs. float32 and float64.
//
// Both work on index spaces of at most kMaxDims dims (kernels.h): a reduction is a "kept"
// space (the output) times a "reduced" space, both striding into the input; a broadcast
// operand is read with stride 0 along its broadcast dims. A broadcast gradient is computed
// over the output's space into scratch, then summed back to the operand's shape.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ndarray/cuda/device_math.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

absl::StatusOr<KernelType> TypeOf(const std::string& op, const std::vector<TBlob>& blobs) {
  for (const TBlob& b : blobs) {
    if (!b.ctx.is_gpu()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": GPU kernel got a blob on ", b.ctx.ToString()));
    }
    if (b.dtype != blobs[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": mixed dtypes ", DTypeName(b.dtype),
                                                     " and ", DTypeName(blobs[0].dtype)));
    }
  }
  return gpu_math::FloatKernelType(op.c_str(), blobs[0].dtype);
}

absl::Status CheckDims(const std::string& op, const Shape& s) {
  return gpu_math::CheckDims(op.c_str(), s);
}

// ---- reductions ----

class ReduceGpuOp : public Operator {
 public:
  ReduceGpuOp(std::string name, std::vector<int> axis, bool exclude)
      : name_(std::move(name)), axis_(std::move(axis)), exclude_(exclude) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(KernelType type, TypeOf(name_, {in[0], out[0]}));
    ASSIGN_OR_RETURN(std::vector<bool> reduced, Reduced(in[0].shape));
    StridedSpace kept, red;
    gpu_math::ReduceSpaces(in[0].shape, reduced, &kept, &red);
    int64_t count = 1;
    for (int d = 0; d < red.ndim; ++d) count *= red.shape[d];
    ReduceCode code = ReduceCode::kSum;
    double scale = 1;
    if (name_ == "mean") {
      scale = count == 0 ? 0 : 1.0 / count;
    } else if (name_ == "max") {
      code = ReduceCode::kMax;
    } else if (name_ == "min") {
      code = ReduceCode::kMin;
    } else if (name_ == "prod") {
      code = ReduceCode::kProd;
    }
    Workspace ws(ctx);
    ASSIGN_OR_RETURN(void* scratch, ws.Get(ReduceScratchBytes(type, kept, red)));
    CUDA_RETURN_IF_ERROR(LaunchReduce(code, type, kept, red, in[0].dptr, out[0].dptr, scale,
                                      static_cast<int>(req[0]), scratch, StreamOf(ctx)));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(KernelType type, TypeOf(name_, {out_grad[0], in_grad[0]}));
    const Shape& s = in_grad[0].shape;
    ASSIGN_OR_RETURN(std::vector<bool> reduced, Reduced(s));
    // Over the input's space: operand strides of the output (0 along reduced dims) and of the
    // input itself.
    StridedSpace space;
    space.ndim = s.ndim();
    int64_t out_stride = 1, in_stride = 1, count = 1;
    for (int d = s.ndim() - 1; d >= 0; --d) {
      space.shape[d] = s[d];
      const int64_t os = reduced[d] ? 0 : out_stride;
      if (!reduced[d]) out_stride *= s[d];
      if (reduced[d]) count *= s[d];
      space.stride[0][d] = os;
      space.stride[1][d] = os;
      space.stride[2][d] = in_stride;
      in_stride *= s[d];
    }
    const cudaStream_t stream = StreamOf(ctx);
    const int r = static_cast<int>(req[0]);
    const void* g = out_grad[0].dptr;
    if (name_ == "sum" || name_ == "mean") {
      const double scale = name_ == "mean" ? (count == 0 ? 0 : 1.0 / count) : 1.0;
      CUDA_RETURN_IF_ERROR(LaunchStridedMap(MapCode::kMulScalar, type, space, g, nullptr, nullptr,
                                            in_grad[0].dptr, scale, r, stream));
      return absl::OkStatus();
    }
    // max/min: g * (x == y), prod: g * y / x, with (g, y, x) in slots (0, 1, 2): g and y
    // through the output's strides, x through the input's.
    RETURN_IF_ERROR(TypeOf(name_, {out_grad[0], out[0], in[0]}).status());
    const MapCode code = name_ == "prod" ? MapCode::kMulDiv : MapCode::kEqMask;
    CUDA_RETURN_IF_ERROR(LaunchStridedMap(code, type, space, g, out[0].dptr, in[0].dptr,
                                          in_grad[0].dptr, 0, r, stream));
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::vector<bool>> Reduced(const Shape& s) const {
    RETURN_IF_ERROR(CheckDims(name_, s));
    std::vector<bool> listed(s.ndim(), axis_.empty());
    for (int a : axis_) {
      const int d = a < 0 ? a + s.ndim() : a;
      if (d < 0 || d >= s.ndim()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": axis ", a, " is out of range for ", s.ToString()));
      }
      listed[d] = true;
    }
    if (exclude_ && !axis_.empty()) listed.flip();
    return listed;
  }

  std::string name_;
  std::vector<int> axis_;
  bool exclude_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateReduce(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  std::vector<int> axis;
  bool exclude = false;
  RETURN_IF_ERROR(r.Read("axis", &axis));
  RETURN_IF_ERROR(r.Read("exclude", &exclude));
  return std::unique_ptr<Operator>(new ReduceGpuOp(prop.TypeString(), axis, exclude));
}

// ---- broadcasting binary operators ----

struct BinaryCodes {
  MapCode forward;
  MapCode lhs_grad, rhs_grad;  // over (g, lhs, rhs) operands
};

BinaryCodes CodesOf(const std::string& name) {
  if (name == "broadcast_sub") return {MapCode::kSub, MapCode::kMulScalar, MapCode::kMulScalar};
  if (name == "broadcast_mul") return {MapCode::kMul, MapCode::kMul, MapCode::kMul};
  if (name == "broadcast_div") return {MapCode::kDiv, MapCode::kDiv, MapCode::kDivRhsGrad};
  if (name == "broadcast_power") {
    return {MapCode::kPower, MapCode::kPowerLhsGrad, MapCode::kPowerRhsGrad};
  }
  if (name == "broadcast_maximum") return {MapCode::kMaximum, MapCode::kGeMask, MapCode::kLtMask};
  if (name == "broadcast_minimum") return {MapCode::kMinimum, MapCode::kLeMask, MapCode::kGtMask};
  return {MapCode::kAdd, MapCode::kMulScalar, MapCode::kMulScalar};
}

void OperandStrides(const Shape& s, const Shape& out, int64_t* strides) {
  gpu_math::BroadcastStrides(s, out, strides);
}

// The spaces that sum a contiguous array of shape `out` down to `target`, which broadcasts to
// it: a dim the target has with the output's extent is kept, broadcast ones are summed.
void SumSpaces(const Shape& target, const Shape& out, StridedSpace* kept, StridedSpace* red) {
  int64_t tstrides[kMaxDims];
  OperandStrides(target, out, tstrides);
  std::vector<bool> reduced(out.ndim());
  for (int d = 0; d < out.ndim(); ++d) reduced[d] = tstrides[d] == 0 && out[d] != 1;
  gpu_math::ReduceSpaces(out, reduced, kept, red);
}

class BroadcastGpuOp : public Operator {
 public:
  explicit BroadcastGpuOp(std::string name) : name_(std::move(name)), codes_(CodesOf(name_)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    ASSIGN_OR_RETURN(KernelType type, TypeOf(name_, {in[0], in[1], out[0]}));
    ASSIGN_OR_RETURN(StridedSpace space, Space(in[0].shape, in[1].shape, out[0].shape));
    // Operands in slots 0 (lhs) and 1 (rhs).
    CUDA_RETURN_IF_ERROR(LaunchStridedMap(codes_.forward, type, space, in[0].dptr, in[1].dptr,
                                          nullptr, out[0].dptr, 0, static_cast<int>(req[0]),
                                          StreamOf(ctx)));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(KernelType type, TypeOf(name_, {out_grad[0], in_grad[0], in_grad[1]}));
    const Shape& out = out_grad[0].shape;
    const Shape& ls = in_grad[0].shape;
    const Shape& rs = in_grad[1].shape;
    RETURN_IF_ERROR(CheckDims(name_, out));
    // Over the output's space, operands (g, lhs, rhs) in slots 0, 1, 2.
    StridedSpace space;
    space.ndim = out.ndim();
    for (int d = 0; d < out.ndim(); ++d) space.shape[d] = out[d];
    OperandStrides(out, out, space.stride[0]);
    OperandStrides(ls, out, space.stride[1]);
    OperandStrides(rs, out, space.stride[2]);
    const void* lhs = in.size() > 0 ? in[0].dptr : nullptr;
    const void* rhs = in.size() > 1 ? in[1].dptr : nullptr;
    // One scratch block (Workspace::Get once per call): the contribution over the output's
    // space, then the reduction's partial sums, 256-byte aligned.
    Workspace ws(ctx);
    void* scratch = nullptr;
    void* reduce_scratch = nullptr;
    if (ls != out || rs != out) {
      const size_t map_bytes = (out_grad[0].Bytes() + 255) / 256 * 256;
      size_t reduce_bytes = 0;
      for (int i = 0; i < 2; ++i) {
        const Shape& target = i == 0 ? ls : rs;
        if (target == out) continue;
        StridedSpace kept, red;
        SumSpaces(target, out, &kept, &red);
        reduce_bytes = std::max(reduce_bytes, ReduceScratchBytes(type, kept, red));
      }
      ASSIGN_OR_RETURN(scratch, ws.Get(map_bytes + reduce_bytes));
      if (reduce_bytes > 0) reduce_scratch = static_cast<char*>(scratch) + map_bytes;
    }
    const cudaStream_t stream = StreamOf(ctx);
    for (int i = 0; i < 2; ++i) {
      if (req[i] == OpReqType::kNullOp) continue;
      const MapCode code = i == 0 ? codes_.lhs_grad : codes_.rhs_grad;
      const double s = (i == 1 && name_ == "broadcast_sub") ? -1.0 : 1.0;
      const Shape& target = i == 0 ? ls : rs;
      // Slots (g, lhs, rhs); the two-operand codes (kMul: g * other, kDiv for lhs: g / rhs)
      // read slot 1, so the other operand goes there.
      const void* b = lhs;
      const void* c = rhs;
      StridedSpace sp = space;
      if (code == MapCode::kMul || (code == MapCode::kDiv && i == 0)) {
        b = i == 0 ? rhs : lhs;
        for (int d = 0; d < kMaxDims; ++d) sp.stride[1][d] = space.stride[i == 0 ? 2 : 1][d];
      }
      if (target == out) {
        CUDA_RETURN_IF_ERROR(LaunchStridedMap(code, type, sp, out_grad[0].dptr, b, c,
                                              in_grad[i].dptr, s, static_cast<int>(req[i]),
                                              stream));
        continue;
      }
      // The contribution over the output's space, then its sum over the broadcast dims.
      CUDA_RETURN_IF_ERROR(
          LaunchStridedMap(code, type, sp, out_grad[0].dptr, b, c, scratch, s, 1, stream));
      StridedSpace kept, red;
      SumSpaces(target, out, &kept, &red);
      CUDA_RETURN_IF_ERROR(LaunchReduce(ReduceCode::kSum, type, kept, red, scratch, in_grad[i].dptr,
                                        1.0, static_cast<int>(req[i]), reduce_scratch, stream));
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<StridedSpace> Space(const Shape& l, const Shape& r, const Shape& out) const {
    RETURN_IF_ERROR(CheckDims(name_, out));
    StridedSpace space;
    space.ndim = out.ndim();
    for (int d = 0; d < out.ndim(); ++d) space.shape[d] = out[d];
    OperandStrides(l, out, space.stride[0]);
    OperandStrides(r, out, space.stride[1]);
    return space;
  }

  std::string name_;
  BinaryCodes codes_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateBroadcast(const OperatorProperty& prop, Context) {
  return std::unique_ptr<Operator>(new BroadcastGpuOp(prop.TypeString()));
}

const bool kRegistered = [] {
  for (const char* name : {"sum", "mean", "max", "min", "prod"}) {
    RegisterGpuOperator(name, CreateReduce);
  }
  for (const char* name : {"broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                           "broadcast_power", "broadcast_maximum", "broadcast_minimum"}) {
    RegisterGpuOperator(name, CreateBroadcast);
  }
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

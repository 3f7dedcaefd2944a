// The device math of ndarray/cuda/device_math.h: argument checks, then one launch of
// ndarray/cuda/tensor_kernels.h per call.
#include "ndarray/cuda/device_math.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"

namespace tessera::gpu_math {
namespace {

using cuda::KernelType;
using cuda::MapCode;
using cuda::StridedSpace;

absl::Status CheckGpu(const char* fn, const char* what, const TBlob& b) {
  if (!b.ctx.is_gpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": ", what, " is on ", b.ctx.ToString(), ", not a GPU"));
  }
  if (b.dptr == nullptr && b.Size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", what, " has no memory"));
  }
  return absl::OkStatus();
}

absl::Status SameDType(const char* fn, const TBlob& a, const TBlob& b) {
  if (a.dtype == b.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(fn, ": dtypes differ, ", DTypeName(a.dtype), " ",
                                                 a.shape.ToString(), " and ", DTypeName(b.dtype),
                                                 " ", b.shape.ToString()));
}

absl::Status SameShape(const char* fn, const TBlob& in, const TBlob& out) {
  if (in.shape == out.shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      fn, ": shape mismatch: in is ", in.shape.ToString(), ", out is ", out.shape.ToString()));
}

// ElemType mirrors DType's values so that converting is a cast.
static_assert(static_cast<int>(cuda::ElemType::kFloat32) == static_cast<int>(DType::kFloat32));
static_assert(static_cast<int>(cuda::ElemType::kFloat64) == static_cast<int>(DType::kFloat64));
static_assert(static_cast<int>(cuda::ElemType::kFloat16) == static_cast<int>(DType::kFloat16));
static_assert(static_cast<int>(cuda::ElemType::kBFloat16) == static_cast<int>(DType::kBFloat16));
static_assert(static_cast<int>(cuda::ElemType::kUInt8) == static_cast<int>(DType::kUInt8));
static_assert(static_cast<int>(cuda::ElemType::kInt8) == static_cast<int>(DType::kInt8));
static_assert(static_cast<int>(cuda::ElemType::kInt32) == static_cast<int>(DType::kInt32));
static_assert(static_cast<int>(cuda::ElemType::kInt64) == static_cast<int>(DType::kInt64));

cuda::ElemType ElemTypeOf(DType dtype) { return static_cast<cuda::ElemType>(dtype); }

absl::Status CheckKnown(const char* fn, DType dtype) {
  if (dtype == DType::kUnknown || !IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": unsupported dtype ", static_cast<int>(dtype)));
  }
  return absl::OkStatus();
}

MapCode BinaryCode(math::BinaryOp op) {
  switch (op) {
    case math::BinaryOp::kAdd:
      return MapCode::kAdd;
    case math::BinaryOp::kSub:
      return MapCode::kSub;
    case math::BinaryOp::kMul:
      return MapCode::kMul;
    case math::BinaryOp::kDiv:
      return MapCode::kDiv;
    case math::BinaryOp::kPow:
      return MapCode::kPower;
    case math::BinaryOp::kMax:
      return MapCode::kMaximum;
    case math::BinaryOp::kMin:
      return MapCode::kMinimum;
  }
  return MapCode::kAdd;
}

MapCode ScalarCode(math::BinaryOp op, bool scalar_on_left) {
  switch (op) {
    case math::BinaryOp::kAdd:
      return MapCode::kPlusScalar;
    case math::BinaryOp::kSub:
      return scalar_on_left ? MapCode::kRMinusScalar : MapCode::kMinusScalar;
    case math::BinaryOp::kMul:
      return MapCode::kMulScalar;
    case math::BinaryOp::kDiv:
      return scalar_on_left ? MapCode::kRDivScalar : MapCode::kDivScalar;
    case math::BinaryOp::kPow:
      return scalar_on_left ? MapCode::kRPowerScalar : MapCode::kPowerScalar;
    // Either order: NaN on either side gives NaN, equal values are equal.
    case math::BinaryOp::kMax:
      return MapCode::kMaximumScalar;
    case math::BinaryOp::kMin:
      return MapCode::kMinimumScalar;
  }
  return MapCode::kPlusScalar;
}

// The reduced dims of `in` for `axes` (empty: all), with math::Reduce's checks.
absl::StatusOr<std::vector<bool>> ReducedDims(const char* fn, const TBlob& in,
                                              absl::Span<const int> axes) {
  const int ndim = in.shape.ndim();
  std::vector<bool> reduced(ndim, axes.empty());
  for (int axis : axes) {
    absl::StatusOr<int> a = NormalizeAxis(axis, ndim);
    if (!a.ok() || (axes.size() > 1 && reduced[*a])) {
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": invalid axes (", absl::StrJoin(axes, ","), ") for input shape ",
                       in.shape.ToString(),
                       a.ok() ? ": repeated axis" : absl::StrCat(": ", a.status().message())));
    }
    reduced[*a] = true;
  }
  return reduced;
}

struct ReducePlan {
  KernelType type;
  StridedSpace kept, red;
  int64_t count = 1;  // elements per output
};

absl::StatusOr<ReducePlan> PlanReduce(const char* fn, const TBlob& in, absl::Span<const int> axes) {
  RETURN_IF_ERROR(CheckGpu(fn, "in", in));
  ReducePlan plan;
  ASSIGN_OR_RETURN(plan.type, FloatKernelType(fn, in.dtype));
  RETURN_IF_ERROR(CheckDims(fn, in.shape));
  ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(fn, in, axes));
  ReduceSpaces(in.shape, reduced, &plan.kept, &plan.red);
  for (int d = 0; d < plan.red.ndim; ++d) plan.count *= plan.red.shape[d];
  return plan;
}

}  // namespace

absl::StatusOr<KernelType> FloatKernelType(const char* fn, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return KernelType::kFloat32;
    case DType::kFloat64:
      return KernelType::kFloat64;
    case DType::kFloat16:
      return KernelType::kFloat16;
    case DType::kBFloat16:
      return KernelType::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": dtype ", DTypeName(dtype),
                       " has no GPU kernel (float32, float64, float16, bfloat16)"));
  }
}

absl::Status CheckDims(const char* fn, const Shape& shape) {
  if (shape.ndim() > cuda::kMaxDims) {
    return absl::UnimplementedError(absl::StrCat(fn, ": the GPU kernels take up to ",
                                                 cuda::kMaxDims, " dims, got ", shape.ToString()));
  }
  return absl::OkStatus();
}

void BroadcastStrides(const Shape& s, const Shape& out, int64_t* strides) {
  const int offset = out.ndim() - s.ndim();
  int64_t stride = 1;
  for (int d = out.ndim() - 1; d >= 0; --d) {
    const int sd = d - offset;
    strides[d] = (sd < 0 || s[sd] == 1) ? 0 : stride;
    if (sd >= 0) stride *= s[sd];
  }
}

void ReduceSpaces(const Shape& in, const std::vector<bool>& reduced, StridedSpace* kept,
                  StridedSpace* red) {
  *kept = StridedSpace();
  *red = StridedSpace();
  std::vector<int64_t> strides(in.ndim());
  int64_t stride = 1;
  for (int d = in.ndim() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= in[d];
  }
  for (int d = 0; d < in.ndim(); ++d) {
    StridedSpace* space = reduced[d] ? red : kept;
    space->shape[space->ndim] = in[d];
    space->stride[0][space->ndim] = strides[d];
    ++space->ndim;
  }
}

absl::Status BroadcastBinary(math::BinaryOp op, const TBlob& lhs, const TBlob& rhs, OpReqType req,
                             const TBlob& out, cudaStream_t stream) {
  constexpr const char* kFn = "BroadcastBinary";
  RETURN_IF_ERROR(CheckGpu(kFn, "lhs", lhs));
  RETURN_IF_ERROR(CheckGpu(kFn, "rhs", rhs));
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  RETURN_IF_ERROR(SameDType(kFn, lhs, rhs));
  RETURN_IF_ERROR(SameDType(kFn, lhs, out));
  absl::StatusOr<Shape> shape = BroadcastShapes(lhs.shape, rhs.shape);
  if (!shape.ok() || *shape != out.shape) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": ", lhs.shape.ToString(), " and ",
                                                   rhs.shape.ToString(), " do not broadcast to ",
                                                   out.shape.ToString()));
  }
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  ASSIGN_OR_RETURN(KernelType type, FloatKernelType(kFn, out.dtype));
  RETURN_IF_ERROR(CheckDims(kFn, out.shape));
  const MapCode code = BinaryCode(op);
  const int r = static_cast<int>(req);
  if (lhs.shape == out.shape && rhs.shape == out.shape) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchMap(code, type, lhs.dptr, rhs.dptr, nullptr, out.dptr,
                                         out.Size(), 0, r, stream));
    return absl::OkStatus();
  }
  StridedSpace space;
  space.ndim = out.shape.ndim();
  for (int d = 0; d < space.ndim; ++d) space.shape[d] = out.shape[d];
  BroadcastStrides(lhs.shape, out.shape, space.stride[0]);
  BroadcastStrides(rhs.shape, out.shape, space.stride[1]);
  CUDA_RETURN_IF_ERROR(cuda::LaunchStridedMap(code, type, space, lhs.dptr, rhs.dptr, nullptr,
                                              out.dptr, 0, r, stream));
  return absl::OkStatus();
}

absl::Status BinaryScalar(math::BinaryOp op, const TBlob& in, double scalar, bool scalar_on_left,
                          OpReqType req, const TBlob& out, cudaStream_t stream) {
  constexpr const char* kFn = "BinaryScalar";
  RETURN_IF_ERROR(CheckGpu(kFn, "in", in));
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  RETURN_IF_ERROR(SameDType(kFn, in, out));
  RETURN_IF_ERROR(SameShape(kFn, in, out));
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  ASSIGN_OR_RETURN(KernelType type, FloatKernelType(kFn, out.dtype));
  CUDA_RETURN_IF_ERROR(cuda::LaunchMap(ScalarCode(op, scalar_on_left), type, in.dptr, nullptr,
                                       nullptr, out.dptr, out.Size(), scalar, static_cast<int>(req),
                                       stream));
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReduceScratchBytes(const TBlob& in, absl::Span<const int> axes) {
  ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce("Reduce", in, axes));
  return cuda::ReduceScratchBytes(plan.type, plan.kept, plan.red);
}

absl::Status Reduce(math::ReduceOp op, const TBlob& in, absl::Span<const int> axes, OpReqType req,
                    const TBlob& out, void* scratch, cudaStream_t stream) {
  constexpr const char* kFn = "Reduce";
  ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce(kFn, in, axes));
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  RETURN_IF_ERROR(SameDType(kFn, in, out));
  int64_t kept = 1;
  for (int d = 0; d < plan.kept.ndim; ++d) kept *= plan.kept.shape[d];
  if (out.Size() != kept) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": reducing ", in.shape.ToString(), " over axes (", absl::StrJoin(axes, ","),
        ") gives ", kept, " elements, but out is ", out.shape.ToString()));
  }
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  cuda::ReduceCode code = cuda::ReduceCode::kSum;
  double scale = 1;
  switch (op) {
    case math::ReduceOp::kSum:
      break;
    case math::ReduceOp::kMean:
      // An empty reduction's mean is NaN, as 0 / 0 on the CPU.
      scale = plan.count == 0 ? NAN : 1.0 / static_cast<double>(plan.count);
      break;
    case math::ReduceOp::kMax:
      code = cuda::ReduceCode::kMax;
      break;
    case math::ReduceOp::kMin:
      code = cuda::ReduceCode::kMin;
      break;
    case math::ReduceOp::kProd:
      code = cuda::ReduceCode::kProd;
      break;
  }
  CUDA_RETURN_IF_ERROR(cuda::LaunchReduce(code, plan.type, plan.kept, plan.red, in.dptr, out.dptr,
                                          scale, static_cast<int>(req), scratch, stream));
  return absl::OkStatus();
}

absl::Status Cast(const TBlob& in, const TBlob& out, cudaStream_t stream) {
  constexpr const char* kFn = "Cast";
  RETURN_IF_ERROR(CheckGpu(kFn, "in", in));
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  RETURN_IF_ERROR(SameShape(kFn, in, out));
  RETURN_IF_ERROR(CheckKnown(kFn, in.dtype));
  RETURN_IF_ERROR(CheckKnown(kFn, out.dtype));
  if (in.dtype == out.dtype) return Copy(in, OpReqType::kWriteTo, out, stream);
  CUDA_RETURN_IF_ERROR(cuda::LaunchCast(ElemTypeOf(in.dtype), in.dptr, ElemTypeOf(out.dtype),
                                        out.dptr, out.Size(), stream));
  return absl::OkStatus();
}

absl::Status Fill(const TBlob& out, double value, cudaStream_t stream) {
  constexpr const char* kFn = "Fill";
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  RETURN_IF_ERROR(CheckKnown(kFn, out.dtype));
  CUDA_RETURN_IF_ERROR(
      cuda::LaunchFill(ElemTypeOf(out.dtype), out.dptr, out.Size(), value, stream));
  return absl::OkStatus();
}

absl::Status Copy(const TBlob& in, OpReqType req, const TBlob& out, cudaStream_t stream) {
  constexpr const char* kFn = "Copy";
  RETURN_IF_ERROR(CheckGpu(kFn, "in", in));
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  RETURN_IF_ERROR(SameDType(kFn, in, out));
  RETURN_IF_ERROR(SameShape(kFn, in, out));
  switch (req) {
    case OpReqType::kNullOp:
      return absl::OkStatus();
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      if (in.dptr == out.dptr || in.Bytes() == 0) return absl::OkStatus();
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(out.dptr, in.dptr, in.Bytes(), cudaMemcpyDeviceToDevice, stream));
      return absl::OkStatus();
    case OpReqType::kAddTo: {
      ASSIGN_OR_RETURN(KernelType type, FloatKernelType("Copy (kAddTo)", out.dtype));
      CUDA_RETURN_IF_ERROR(cuda::LaunchAddTo(type, in.dptr, out.dptr, out.Size(), stream));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(kFn, ": unknown req ", static_cast<int>(req)));
}

absl::Status Sample(Distribution dist, double a, double b, engine::PhiloxRandom* gen,
                    const TBlob& out, cudaStream_t stream) {
  constexpr const char* kFn = "Sample";
  RETURN_IF_ERROR(CheckGpu(kFn, "out", out));
  ASSIGN_OR_RETURN(KernelType type, FloatKernelType(kFn, out.dtype));
  const cuda::SampleCode code =
      dist == Distribution::kNormal ? cuda::SampleCode::kNormal : cuda::SampleCode::kUniform;
  CUDA_RETURN_IF_ERROR(cuda::LaunchSample(code, type, *gen, a, b, out.dptr, out.Size(), stream));
  gen->Skip(static_cast<uint64_t>(cuda::SampleOutputs(code, type, out.Size())));
  return absl::OkStatus();
}

}  // namespace tessera::gpu_math

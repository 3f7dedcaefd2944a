// Helpers of the array operators' GPU twins (see array_ops_util.h).
#include "ops/cuda/array_ops_util.h"

#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"

namespace tessera::ops::cuda {

absl::StatusOr<ArrayType> ArrayTypeOf(absl::string_view op, DType dtype) {
  if (dtype == DType::kUnknown || !IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": unsupported dtype ", DTypeName(dtype), " on the GPU"));
  }
  return static_cast<ArrayType>(static_cast<int>(dtype));
}

absl::StatusOr<ArrayType> FloatArrayTypeOf(absl::string_view op, DType dtype) {
  if (!IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dtype ", DTypeName(dtype),
                     " has no GPU kernel (float32, float64, float16, bfloat16)"));
  }
  return ArrayTypeOf(op, dtype);
}

absl::Status CheckBlobs(absl::string_view op, std::initializer_list<const TBlob*> blobs,
                        DType dtype) {
  for (const TBlob* b : blobs) {
    if (b->dptr == nullptr) continue;
    if (!b->ctx.is_gpu()) {
      return absl::FailedPreconditionError(
          absl::StrCat(op, ": GPU kernel got a blob on ", b->ctx.ToString()));
    }
    if (b->dtype != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": mixed dtypes ", DTypeName(b->dtype), " and ", DTypeName(dtype)));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.ndim());
  int64_t stride = 1;
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

absl::Status CopyBlob(absl::string_view op, const TBlob& in, const TBlob& out, OpReqType req,
                      cudaStream_t stream) {
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  if (in.Size() != out.Size()) {
    return absl::InternalError(absl::StrCat(op, ": copy between blobs of different sizes ",
                                            in.shape.ToString(), " and ", out.shape.ToString()));
  }
  RETURN_IF_ERROR(CheckBlobs(op, {&in, &out}, in.dtype));
  absl::StatusOr<ArrayType> type = ArrayTypeOf(op, in.dtype);
  if (!type.ok()) return type.status();
  CUDA_RETURN_IF_ERROR(
      LaunchCopy(*type, in.dptr, out.dptr, in.Size(), static_cast<int>(req), stream));
  return absl::OkStatus();
}

absl::Status ZeroBlob(absl::string_view op, const TBlob& out, OpReqType req, cudaStream_t stream) {
  if (req != OpReqType::kWriteTo && req != OpReqType::kWriteInplace) return absl::OkStatus();
  RETURN_IF_ERROR(CheckBlobs(op, {&out}, out.dtype));
  absl::StatusOr<ArrayType> type = ArrayTypeOf(op, out.dtype);
  if (!type.ok()) return type.status();
  CUDA_RETURN_IF_ERROR(LaunchZero(*type, out.dptr, out.Size(), static_cast<int>(req), stream));
  return absl::OkStatus();
}

absl::Status StridedCopy(absl::string_view op, DType dtype, const std::vector<int64_t>& shape,
                         const void* in, const std::vector<int64_t>& in_stride, void* out,
                         const std::vector<int64_t>& out_stride, OpReqType req,
                         cudaStream_t stream) {
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  absl::StatusOr<ArrayType> type = ArrayTypeOf(op, dtype);
  if (!type.ok()) return type.status();
  CopySpace space;
  if (!MakeCopySpace(static_cast<int>(shape.size()), shape.data(), in_stride.data(),
                     out_stride.data(), &space)) {
    return absl::UnimplementedError(absl::StrCat(op, ": the GPU kernel moves at most ",
                                                 kMaxCopyDims, " non-mergeable dims, got ",
                                                 Shape(shape.begin(), shape.end()).ToString()));
  }
  CUDA_RETURN_IF_ERROR(LaunchStridedCopy(*type, space, in, out, static_cast<int>(req), stream));
  return absl::OkStatus();
}

}  // namespace tessera::ops::cuda

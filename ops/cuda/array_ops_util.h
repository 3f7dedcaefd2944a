// Host-side helpers of the array operators' GPU twins (array_copy_ops.cc, elementwise_sum.cc,
// embedding.cc, loss_outputs.cc): dtype to kernel type, the blob checks every Forward and
// Backward does, and copies / zero fills with an OpReqType over the launchers of
// array_kernels.h, with errors that name the operator.
//
// Stateless functions, safe from any thread; the copies enqueue on the given stream.
#ifndef TESSERA_OPS_CUDA_ARRAY_OPS_UTIL_H_
#define TESSERA_OPS_CUDA_ARRAY_OPS_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "ops/cuda/array_kernels.h"

namespace tessera::ops::cuda {

// The kernels' type of `dtype`; INVALID_ARGUMENT naming `op` for kUnknown or a bad value.
absl::StatusOr<ArrayType> ArrayTypeOf(absl::string_view op, DType dtype);
// As ArrayTypeOf for the floating-point types, the ones arithmetic kernels take; any other is
// "<op>: dtype int32 has no GPU kernel (float32, float64, float16, bfloat16)".
absl::StatusOr<ArrayType> FloatArrayTypeOf(absl::string_view op, DType dtype);

// FAILED_PRECONDITION naming `op` unless every blob with data is on a GPU; INVALID_ARGUMENT
// unless each of them has `dtype`. Blobs without data (backward dependencies the property
// did not declare) are skipped.
absl::Status CheckBlobs(absl::string_view op, std::initializer_list<const TBlob*> blobs,
                        DType dtype);

// Row-major element strides of `shape`.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

// `in` to `out` per `req`, any dtype; INTERNAL when their sizes differ (a shape bug).
absl::Status CopyBlob(absl::string_view op, const TBlob& in, const TBlob& out, OpReqType req,
                      cudaStream_t stream);
// Zeros per `req` (adding zero is nothing to do).
absl::Status ZeroBlob(absl::string_view op, const TBlob& out, OpReqType req, cudaStream_t stream);

// out (per req) = in over an index space of `shape`, each operand with its element strides
// (LaunchStridedCopy). UNIMPLEMENTED when more than kMaxCopyDims dims remain after merging.
absl::Status StridedCopy(absl::string_view op, DType dtype, const std::vector<int64_t>& shape,
                         const void* in, const std::vector<int64_t>& in_stride, void* out,
                         const std::vector<int64_t>& out_stride, OpReqType req,
                         cudaStream_t stream);

// `p` advanced by `elements` elements of `dtype`.
inline const void* ElementPtr(const void* p, DType dtype, int64_t elements) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(DTypeSize(dtype));
}
inline void* ElementPtr(void* p, DType dtype, int64_t elements) {
  return static_cast<char*>(p) + elements * static_cast<int64_t>(DTypeSize(dtype));
}

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_ARRAY_OPS_UTIL_H_

// Tensor math on TBlobs: the CPU kernels shared by NDArray's arithmetic and by the
// operators (elementwise with broadcasting, reductions, GEMM, casts, fills). They run in
// the calling thread (call them from inside an engine function) and honour OpReqType.
//
// Every function checks what it can about its blobs (device, dtypes, shapes) and returns
// INVALID_ARGUMENT naming the shapes/dtypes rather than touching memory it should not.
// Half types compute in float. Thread-compatible: no state.
#ifndef TESSERA_NDARRAY_MATH_H_
#define TESSERA_NDARRAY_MATH_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/tblob.h"

namespace tessera::math {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin };
enum class ReduceOp { kSum, kMean, kMax, kMin, kProd };

// out = lhs op rhs with NumPy broadcasting; out.shape must be BroadcastShapes(lhs, rhs) and
// all three the same dtype. `out` may alias `lhs` or `rhs` when it has their shape.
absl::Status BroadcastBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, OpReqType req,
                             const TBlob& out);
// out = in op scalar, or scalar op in when `scalar_on_left`.
absl::Status BinaryScalar(BinaryOp op, const TBlob& in, double scalar, bool scalar_on_left,
                          OpReqType req, const TBlob& out);
// Reduces `in` over `axes` (any order, negatives allowed, empty = all). `out` has in's
// shape with those axes removed or set to 1 (either; only the element count is checked
// against the kept dims), or Shape{1} for a full reduction.
absl::Status Reduce(ReduceOp op, const TBlob& in, absl::Span<const int> axes, OpReqType req,
                    const TBlob& out);
// Sums `in` down to out.shape, which `in` broadcasts from: the gradient of broadcasting.
absl::Status SumToShape(const TBlob& in, OpReqType req, const TBlob& out);
// c = alpha * op(a) * op(b) + beta * c for 2-D float32 (oneDNN sgemm) or float64 blobs;
// op transposes when the flag is set; with beta == 0, c is never read (fresh storage may
// hold NaN). INVALID_ARGUMENT names the shapes on a mismatch.
absl::Status Gemm(bool transpose_a, bool transpose_b, double alpha, const TBlob& a,
                  const TBlob& b, double beta, const TBlob& c);
// Elementwise conversion between any two dtypes of equal shape.
absl::Status Cast(const TBlob& in, const TBlob& out);
// Every element = value (converted to out's dtype).
absl::Status Fill(const TBlob& out, double value);
// out (per req) = in, same shape and dtype.
absl::Status Copy(const TBlob& in, OpReqType req, const TBlob& out);

}  // namespace tessera::math

#endif  // TESSERA_NDARRAY_MATH_H_

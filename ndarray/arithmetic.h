// NDArray arithmetic: elementwise operations with NumPy broadcasting and scalars, in-place
// updates, reductions, matrix product, casts, copies between devices and filled arrays.
//
// Every function checks shapes, dtypes and devices first and returns INVALID_ARGUMENT
// naming both shapes/dtypes (nothing is pushed then); otherwise it allocates the result,
// pushes one engine function that runs a kernel of ndarray/math.h, and returns at once.
// A failure inside the kernel is stored on the result's variable and comes back from its
// next WaitToRead/AsVector.
//
// Devices: both operands must live on the same context. Kernels are CPU kernels, so
// compute on GPU arrays is UNIMPLEMENTED here (copy to the CPU with CopyTo); CopyTo and
// CopyFromTo do move data between the CPU and GPUs.
//
// Thread safety: as NDArray; the engine orders the pushed work.
#ifndef TESSERA_NDARRAY_ARITHMETIC_H_
#define TESSERA_NDARRAY_ARITHMETIC_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"

namespace tessera {

// ---- Filled arrays ----
absl::StatusOr<NDArray> Full(const Runtime& rt, const Shape& shape, double value,
                             Context ctx = Context::CPU(), DType dtype = DType::kFloat32);
absl::StatusOr<NDArray> Zeros(const Runtime& rt, const Shape& shape, Context ctx = Context::CPU(),
                              DType dtype = DType::kFloat32);
absl::StatusOr<NDArray> Ones(const Runtime& rt, const Shape& shape, Context ctx = Context::CPU(),
                             DType dtype = DType::kFloat32);
// Sets every element of `array` to `value` (converted to its dtype), asynchronously.
absl::Status Fill(const NDArray& array, double value);

// ---- Elementwise, broadcasting ----
// lhs op rhs: same dtype, shapes broadcastable (NumPy rules); the result has the broadcast
// shape. With a scalar, the scalar is converted to the array's dtype's arithmetic type.
absl::StatusOr<NDArray> Add(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Subtract(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Multiply(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Divide(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Add(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> Subtract(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> Multiply(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> Divide(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> Add(double lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Subtract(double lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Multiply(double lhs, const NDArray& rhs);
absl::StatusOr<NDArray> Divide(double lhs, const NDArray& rhs);

absl::StatusOr<NDArray> operator+(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator-(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator*(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator/(const NDArray& lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator+(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> operator-(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> operator*(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> operator/(const NDArray& lhs, double rhs);
absl::StatusOr<NDArray> operator+(double lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator-(double lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator*(double lhs, const NDArray& rhs);
absl::StatusOr<NDArray> operator/(double lhs, const NDArray& rhs);

// ---- In place ----
// lhs op= rhs, writing through lhs's storage (so every view sharing it sees the result).
// rhs must broadcast to lhs's shape (the result may not grow lhs). rhs may share storage
// with lhs, overlapping or not: the result is as if rhs had been read completely first.
absl::Status operator+=(const NDArray& lhs, const NDArray& rhs);
absl::Status operator-=(const NDArray& lhs, const NDArray& rhs);
absl::Status operator*=(const NDArray& lhs, const NDArray& rhs);
absl::Status operator/=(const NDArray& lhs, const NDArray& rhs);
absl::Status operator+=(const NDArray& lhs, double rhs);
absl::Status operator-=(const NDArray& lhs, double rhs);
absl::Status operator*=(const NDArray& lhs, double rhs);
absl::Status operator/=(const NDArray& lhs, double rhs);

// ---- Reductions ----
// Over `axes` (negative counts from the end; empty means all). keepdims keeps the reduced
// axes as 1; otherwise they are removed, and a full reduction gives Shape{1}. Duplicate or
// out-of-range axes are INVALID_ARGUMENT.
absl::StatusOr<NDArray> Sum(const NDArray& in, absl::Span<const int> axes = {},
                            bool keepdims = false);
absl::StatusOr<NDArray> Mean(const NDArray& in, absl::Span<const int> axes = {},
                             bool keepdims = false);
absl::StatusOr<NDArray> Max(const NDArray& in, absl::Span<const int> axes = {},
                            bool keepdims = false);

// ---- Linear algebra ----
// op(a) x op(b) for 2-D float32/float64 arrays, op transposing when its flag is set.
absl::StatusOr<NDArray> Dot(const NDArray& a, const NDArray& b, bool transpose_a = false,
                            bool transpose_b = false);

// ---- Types and devices ----
// A new array of `dtype` with in's values converted (round-to-nearest for the half types,
// C++ conversion otherwise).
absl::StatusOr<NDArray> Cast(const NDArray& in, DType dtype);
inline absl::StatusOr<NDArray> AsType(const NDArray& in, DType dtype) { return Cast(in, dtype); }

// A copy of `in` on `ctx` (a new chunk even when ctx is in's own context).
absl::StatusOr<NDArray> CopyTo(const NDArray& in, Context ctx);
// Copies `from` into `to` (same shape and dtype, any contexts). Host<->GPU copies run on
// the GPU's copy stream (FnProperty::kCopyToGPU / kCopyFromGPU).
absl::Status CopyFromTo(const NDArray& from, const NDArray& to, int priority = 0);

}  // namespace tessera

#endif  // TESSERA_NDARRAY_ARITHMETIC_H_

// Tensor math on GPU TBlobs: the device twin of ndarray/math.h, shared by NDArray's arithmetic
// and random fills and by the CUDA operators. Every function enqueues kernels on `stream` and
// returns at once (no synchronize, no host staging); call it from inside an engine function
// on the blobs' device, with the run context's stream. Errors are INVALID_ARGUMENT naming the
// function, shapes and dtypes before anything is enqueued; a failing launch is the CUDA error.
//
// Dtypes: Fill, Cast and Copy take every dtype; arithmetic, reductions and sampling take the
// floating-point ones (float32, float64, float16, bfloat16; the half types compute in float).
// Results match math.h's up to float rounding (reductions sum in a tree, not in order).
//
// Only built with CUDA (TESSERA_USE_CUDA). Stateless, thread-compatible.
#ifndef TESSERA_NDARRAY_CUDA_DEVICE_MATH_H_
#define TESSERA_NDARRAY_CUDA_DEVICE_MATH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "engine/philox.h"
#include "ndarray/cuda/tensor_kernels.h"
#include "ndarray/math.h"

namespace tessera::gpu_math {

// ---- building blocks of the kernels' index spaces (also used by ops/cuda) ----

// The kernel type of a floating-point dtype; INVALID_ARGUMENT naming `fn` otherwise.
absl::StatusOr<cuda::KernelType> FloatKernelType(const char* fn, DType dtype);
// UNIMPLEMENTED naming `fn` when `shape` has more dims than the kernels' index spaces.
absl::Status CheckDims(const char* fn, const Shape& shape);
// Element strides of `s` (right-aligned, NumPy broadcasting) over the space of `out`: 0 along
// the dims `s` broadcasts. `strides` has out.ndim() entries.
void BroadcastStrides(const Shape& s, const Shape& out, int64_t* strides);
// The dims of a contiguous `in`, split into the kept space (the output, in order) and the
// reduced space, by `reduced[d]`; both stride into `in` through stride[0].
void ReduceSpaces(const Shape& in, const std::vector<bool>& reduced, cuda::StridedSpace* kept,
                  cuda::StridedSpace* red);

// ---- math.h on the device ----

absl::Status BroadcastBinary(math::BinaryOp op, const TBlob& lhs, const TBlob& rhs, OpReqType req,
                             const TBlob& out, cudaStream_t stream);
absl::Status BinaryScalar(math::BinaryOp op, const TBlob& in, double scalar, bool scalar_on_left,
                          OpReqType req, const TBlob& out, cudaStream_t stream);

// Scratch Reduce needs for these arguments (0: none); errors as Reduce's.
absl::StatusOr<size_t> ReduceScratchBytes(const TBlob& in, absl::Span<const int> axes);
// As math::Reduce; `scratch` holds ReduceScratchBytes() bytes of device memory that no other
// stream uses until this one has passed the reduction.
absl::Status Reduce(math::ReduceOp op, const TBlob& in, absl::Span<const int> axes, OpReqType req,
                    const TBlob& out, void* scratch, cudaStream_t stream);

absl::Status Cast(const TBlob& in, const TBlob& out, cudaStream_t stream);
absl::Status Fill(const TBlob& out, double value, cudaStream_t stream);
absl::Status Copy(const TBlob& in, OpReqType req, const TBlob& out, cudaStream_t stream);

// Uniform samples in [low, high) or normal ones (mean, std) into `out`, the same values as
// ndarray/random.cc draws on the CPU from the same generator state; advances `gen` past them.
enum class Distribution { kUniform, kNormal };
absl::Status Sample(Distribution dist, double a, double b, engine::PhiloxRandom* gen,
                    const TBlob& out, cudaStream_t stream);

}  // namespace tessera::gpu_math

#endif  // TESSERA_NDARRAY_CUDA_DEVICE_MATH_H_

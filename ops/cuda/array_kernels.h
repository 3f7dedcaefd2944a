// The CUDA kernels of the array operators (ops/array on the GPU) behind plain launch
// functions: strided and contiguous copies with an OpReqType for every element type, the
// n-ary sum, Embedding's gather and scatter-add, and the loss heads' sigmoid and gradients.
// Shared by array_kernels.cu and the operators' .cc files, so it holds no CUDA syntax and no
// absl (see kernels.h).
//
// Every launcher enqueues on `stream` and returns the first CUDA error of its calls
// (cudaGetLastError() of a launch; errors of a kernel itself surface at the next
// synchronization). `req` is an OpReqType value (0 null, 1 write, 2 write in place, 3 add to).
// Pointers are device pointers. Arithmetic (kAddTo, sums, gradients) on float16 / bfloat16
// is done in float and rounded to nearest even on store, as the CPU kernels do (AccType).
//
// Thread safety: the launchers keep no state.
#ifndef TESSERA_OPS_CUDA_ARRAY_KERNELS_H_
#define TESSERA_OPS_CUDA_ARRAY_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ndarray/cuda/tensor_kernels.h"

namespace tessera::ops::cuda {

// Element types: tensor_kernels.h's, whose values are DType's (the operators convert with a
// cast).
using ArrayType = ::tessera::cuda::ElemType;

// An index space of up to kMaxCopyDims dims read from `in` and written to `out`, each
// through its own element strides. Transposes of up to 16 axes fit even before merging.
inline constexpr int kMaxCopyDims = 16;
struct CopySpace {
  int ndim = 0;
  int64_t shape[kMaxCopyDims] = {};
  int64_t in_stride[kMaxCopyDims] = {};
  int64_t out_stride[kMaxCopyDims] = {};
};

// Fills `space` from `ndim` dims (the shape and each operand's element strides), dropping
// size-1 dims and merging neighbours that are contiguous in both operands: a transpose keeps
// only the axes it really permutes, a Concat slab becomes 2-D. False when more than
// kMaxCopyDims dims remain. Host code.
bool MakeCopySpace(int ndim, const int64_t* shape, const int64_t* in_stride,
                   const int64_t* out_stride, CopySpace* space);

// out[offset_out(c)] (per req) = in[offset_in(c)] for every coordinate c of `space`. Writes
// move bytes (any dtype); kAddTo adds in the type. The launcher simplifies the space as
// MakeCopySpace does, then, for writes, widens the element up to 16 bytes where the
// innermost run is contiguous in both operands and aligned, so a Concat or SliceChannel slab
// moves as wide words. `in` and `out` must not overlap, except exactly (the same memory and
// strides: nothing to do for a write).
cudaError_t LaunchStridedCopy(ArrayType type, const CopySpace& space, const void* in, void* out,
                              int req, cudaStream_t stream);

// out[i] (per req) = in[i], i < n: a device-to-device cudaMemcpyAsync for a write (none when
// in == out, the in-place case), an elementwise add for kAddTo (in == out doubles, as on the
// CPU).
cudaError_t LaunchCopy(ArrayType type, const void* in, void* out, int64_t n, int req,
                       cudaStream_t stream);

// out[i] = 0 for a write (cudaMemsetAsync: all-zero bits are 0 in every type); nothing for
// kNullOp and kAddTo.
cudaError_t LaunchZero(ArrayType type, void* out, int64_t n, int req, cudaStream_t stream);

// ElementWiseSum: the input pointers travel in the kernel's parameters, kMaxSumInputs per
// launch, so no device memory is needed for them.
inline constexpr int kMaxSumInputs = 16;
struct SumInputs {
  int n = 0;
  const void* in[kMaxSumInputs] = {};
};
// How a sum launch combines with out:
enum class SumMode : int {
  kStore = 0,  // out (per req) = in[0] + in[1] + ... (in order, in AccType)
  kChain = 1,  // out = ((out + in[0]) + in[1]) + ...: the next inputs of a longer sum
};
// out[i] per `mode` for i < n. out may alias in[0] exactly (every input of an element is
// read before it is written). `req` applies to kStore only.
cudaError_t LaunchSum(ArrayType type, const SumInputs& inputs, void* out, int64_t n, SumMode mode,
                      int req, cudaStream_t stream);

// Embedding. Indices are converted as the CPU does (truncation toward zero of the value) and,
// since a kernel cannot return an error, clamped into [0, input_dim) like MXNet's GPU kernel:
// negative and NaN indices read row 0, those >= input_dim the last row (the CPU operator
// rejects them with INVALID_ARGUMENT instead).
//
// out[i * dim + j] (per req) = weight[index(data[i]) * dim + j], i < num_indices; weight and
// out have `type` (a float type), data `index_type` (any).
cudaError_t LaunchEmbeddingGather(ArrayType type, ArrayType index_type, const void* data,
                                  int64_t num_indices, const void* weight, int64_t input_dim,
                                  int64_t dim, void* out, int req, cudaStream_t stream);
// acc[index(data[i]) * dim + j] += out_grad[i * dim + j] with atomics. `acc` is float32 for
// float16 / bfloat16 out_grad (summed in float, see EmbeddingFinish), else out_grad's type.
cudaError_t LaunchEmbeddingScatterAdd(ArrayType type, ArrayType index_type, const void* data,
                                      int64_t num_indices, const void* out_grad, int64_t input_dim,
                                      int64_t dim, void* acc, cudaStream_t stream);
// grad[i] (per req) = acc[i] (float32) rounded to `type` (float16 or bfloat16), i < n.
cudaError_t LaunchEmbeddingFinish(ArrayType type, const float* acc, void* grad, int64_t n, int req,
                                  cudaStream_t stream);

// LogisticRegressionOutput forward: out[i] (per req) = 1 / (1 + exp(-x[i])). Float types.
cudaError_t LaunchSigmoid(ArrayType type, const void* x, void* out, int64_t n, int req,
                          cudaStream_t stream);
// The regression heads' gradient: grad[i] (per req) = scale * (out[i] - label[i]), or
// scale * sign(out[i] - label[i]) when `sign` (MAERegressionOutput). Float types; `scale`
// is rounded to the accumulation type first, as on the CPU.
cudaError_t LaunchRegressionGrad(ArrayType type, bool sign, const void* out, const void* label,
                                 void* grad, int64_t n, double scale, int req, cudaStream_t stream);
// MakeLoss normalization='valid': *count += the number of x[i] > thresh (thresh rounded to
// the accumulation type). `count` must be zeroed first. Float types.
cudaError_t LaunchCountAbove(ArrayType type, const void* x, int64_t n, double thresh,
                             unsigned long long* count,
                             cudaStream_t stream);  // NOLINT(runtime/int)
// MakeLoss gradient: grad[i] (per req) = grad_scale / norm, with norm = max(*count, 1) when
// `count` is given (read on the device), else `norm`. Float types.
cudaError_t LaunchMakeLossGrad(ArrayType type, void* grad, int64_t n, double grad_scale,
                               const unsigned long long* count,  // NOLINT(runtime/int)
                               double norm, int req, cudaStream_t stream);

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_ARRAY_KERNELS_H_

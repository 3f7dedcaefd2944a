// The kernels behind ops/cuda/array_kernels.h. Data movement is typeless (elements moved by
// their byte size, widened where the layout allows); arithmetic goes through ToAcc / FromAcc,
// which compute float16 and bfloat16 in float and round to nearest even on store, exactly as
// the CPU's Half / BFloat16 conversions (core/dtype.h) do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "ndarray/cuda/element_types.cuh"
#include "ndarray/cuda/launch_util.cuh"
#include "ops/cuda/array_kernels.h"

namespace tessera::ops::cuda {
namespace {

using ::tessera::cuda::Blocks;
using ::tessera::cuda::GridStart;
using ::tessera::cuda::GridStride;
using ::tessera::cuda::kThreads;

using ::tessera::cuda::Acc;
using ::tessera::cuda::FromAcc;
using ::tessera::cuda::StoreAcc;
using ::tessera::cuda::ToAcc;

__device__ __forceinline__ float Exp(float x) { return expf(x); }
__device__ __forceinline__ double Exp(double x) { return exp(x); }

int64_t ElemSize(ArrayType type) {
  switch (type) {
    case ArrayType::kFloat64:
    case ArrayType::kInt64:
      return 8;
    case ArrayType::kFloat32:
    case ArrayType::kInt32:
      return 4;
    case ArrayType::kFloat16:
    case ArrayType::kBFloat16:
      return 2;
    case ArrayType::kUInt8:
    case ArrayType::kInt8:
      return 1;
  }
  return 0;
}

// ---- strided copies ----

// The operands' offsets of linear index i of the space (row-major over s.shape). Dim 0 needs
// no modulo: i < n leaves i < shape[0] after the divisions.
template <typename Index>
__host__ __device__ __forceinline__ void Offsets(const CopySpace& s, Index i, Index* in_off,
                                                 Index* out_off) {
  Index a = 0, b = 0;
  for (int d = s.ndim - 1; d > 0; --d) {
    const Index extent = static_cast<Index>(s.shape[d]);
    const Index c = i % extent;
    i /= extent;
    a += c * static_cast<Index>(s.in_stride[d]);
    b += c * static_cast<Index>(s.out_stride[d]);
  }
  *in_off = a + i * static_cast<Index>(s.in_stride[0]);
  *out_off = b + i * static_cast<Index>(s.out_stride[0]);
}

// E: an unsigned word of the (possibly widened) element size.
template <typename E, typename Index>
__global__ void StridedMoveKernel(CopySpace s, const E* __restrict__ in, E* __restrict__ out,
                                  int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Index a, b;
    Offsets<Index>(s, static_cast<Index>(i), &a, &b);
    out[b] = in[a];
  }
}

template <typename T, typename Index>
__global__ void StridedAddKernel(CopySpace s, const T* in, T* out, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Index a, b;
    Offsets<Index>(s, static_cast<Index>(i), &a, &b);
    out[b] = FromAcc<T>(ToAcc(out[b]) + ToAcc(in[a]));
  }
}

// Whether every index and offset of the space fits 32 bits (cheaper divisions).
bool Fits32(const CopySpace& s, int64_t n) {
  int64_t max_in = 0, max_out = 0;
  for (int d = 0; d < s.ndim; ++d) {
    max_in += (s.shape[d] - 1) * s.in_stride[d];
    max_out += (s.shape[d] - 1) * s.out_stride[d];
  }
  return n <= INT32_MAX && max_in <= INT32_MAX && max_out <= INT32_MAX;
}

template <typename E>
cudaError_t LaunchMove(const CopySpace& s, const void* in, void* out, int64_t n,
                       cudaStream_t stream) {
  if (Fits32(s, n)) {
    StridedMoveKernel<E, uint32_t>
        <<<Blocks(n), kThreads, 0, stream>>>(s, static_cast<const E*>(in), static_cast<E*>(out), n);
  } else {
    StridedMoveKernel<E, int64_t>
        <<<Blocks(n), kThreads, 0, stream>>>(s, static_cast<const E*>(in), static_cast<E*>(out), n);
  }
  return cudaGetLastError();
}

// Widens a write: pairs of elements of the innermost run, contiguous in both operands, move
// as one element of twice the size while the run splits evenly, every outer stride stays a
// whole number of wide elements and both base addresses are aligned to the wide size (at
// most 16 bytes, uint4). Returns the new element size; `s` is rescaled to it.
int64_t Widen(CopySpace* s, int64_t elem, const void* in, const void* out) {
  const int last = s->ndim - 1;
  const uintptr_t in_addr = reinterpret_cast<uintptr_t>(in);
  const uintptr_t out_addr = reinterpret_cast<uintptr_t>(out);
  while (elem < 16 && s->in_stride[last] == 1 && s->out_stride[last] == 1 &&
         s->shape[last] % 2 == 0 && in_addr % (2 * elem) == 0 && out_addr % (2 * elem) == 0) {
    for (int d = 0; d < last; ++d) {
      if (s->in_stride[d] % 2 != 0 || s->out_stride[d] % 2 != 0) return elem;
    }
    for (int d = 0; d < last; ++d) {
      s->in_stride[d] /= 2;
      s->out_stride[d] /= 2;
    }
    s->shape[last] /= 2;
    elem *= 2;
  }
  return elem;
}

// ---- contiguous ----

template <typename T>
__global__ void AddKernel(const T* in, T* out, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    out[i] = FromAcc<T>(ToAcc(out[i]) + ToAcc(in[i]));
  }
}

template <typename T>
__global__ void SumKernel(SumInputs inputs, T* out, int64_t n, int mode, int req) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Acc<T> acc;
    int k = 0;
    if (mode == static_cast<int>(SumMode::kChain)) {
      acc = ToAcc(out[i]);
    } else {
      acc = ToAcc(static_cast<const T*>(inputs.in[0])[i]);
      k = 1;
    }
    for (; k < inputs.n; ++k) acc += ToAcc(static_cast<const T*>(inputs.in[k])[i]);
    if (mode == static_cast<int>(SumMode::kChain)) {
      out[i] = FromAcc<T>(acc);
    } else {
      StoreAcc(out + i, req, acc);
    }
  }
}

// ---- Embedding ----

// Row of index value v: truncated toward zero as the CPU's cast, clamped into [0, rows).
template <typename I>
__host__ __device__ __forceinline__ int64_t RowOf(I v, int64_t rows) {
  if constexpr (std::is_integral_v<I>) {
    const int64_t j = static_cast<int64_t>(v);
    return j < 0 ? 0 : (j >= rows ? rows - 1 : j);
  } else {
    const double d = static_cast<double>(ToAcc(v));
    if (!(d >= 0)) return 0;  // negative or NaN
    if (d >= static_cast<double>(rows)) return rows - 1;
    return static_cast<int64_t>(d);
  }
}

template <typename T, typename I>
__global__ void GatherKernel(const I* data, const T* weight, T* out, int64_t total, int64_t dim,
                             int64_t rows, int req) {
  for (int64_t t = GridStart(); t < total; t += GridStride()) {
    const int64_t i = t / dim;
    const int64_t j = t - i * dim;
    const T w = weight[RowOf(data[i], rows) * dim + j];
    if (req == 3) {
      out[t] = FromAcc<T>(ToAcc(out[t]) + ToAcc(w));
    } else {
      out[t] = w;  // the bits, as the CPU's memcpy
    }
  }
}

// A: the accumulator's type (float for the half types).
template <typename A, typename T, typename I>
__global__ void ScatterAddKernel(const I* data, const T* out_grad, A* acc, int64_t total,
                                 int64_t dim, int64_t rows) {
  for (int64_t t = GridStart(); t < total; t += GridStride()) {
    const int64_t i = t / dim;
    const int64_t j = t - i * dim;
    atomicAdd(acc + RowOf(data[i], rows) * dim + j, static_cast<A>(ToAcc(out_grad[t])));
  }
}

template <typename T>
__global__ void FinishKernel(const float* acc, T* grad, int64_t n, int req) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) StoreAcc(grad + i, req, acc[i]);
}

template <typename T>
cudaError_t GatherT(ArrayType index_type, const void* data, int64_t num_indices, const void* weight,
                    int64_t rows, int64_t dim, void* out, int req, cudaStream_t stream) {
  const int64_t total = num_indices * dim;
  TESSERA_ELEM_TYPE_SWITCH(index_type, I,
                           GatherKernel<T, I><<<Blocks(total), kThreads, 0, stream>>>(
                               static_cast<const I*>(data), static_cast<const T*>(weight),
                               static_cast<T*>(out), total, dim, rows, req));
  return cudaGetLastError();
}

template <typename T>
cudaError_t ScatterAddT(ArrayType index_type, const void* data, int64_t num_indices,
                        const void* out_grad, int64_t rows, int64_t dim, void* acc,
                        cudaStream_t stream) {
  using A = std::conditional_t<std::is_same_v<Acc<T>, T>, T, float>;
  const int64_t total = num_indices * dim;
  TESSERA_ELEM_TYPE_SWITCH(index_type, I,
                           ScatterAddKernel<A, T, I><<<Blocks(total), kThreads, 0, stream>>>(
                               static_cast<const I*>(data), static_cast<const T*>(out_grad),
                               static_cast<A*>(acc), total, dim, rows));
  return cudaGetLastError();
}

// ---- loss heads ----

template <typename T>
__global__ void SigmoidKernel(const T* x, T* out, int64_t n, int req) {
  using A = Acc<T>;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    StoreAcc(out + i, req, A(1) / (A(1) + Exp(-ToAcc(x[i]))));
  }
}

template <typename T>
__global__ void RegressionGradKernel(bool sign, const T* out, const T* label, T* grad, int64_t n,
                                     Acc<T> scale, int req) {
  using A = Acc<T>;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const A diff = ToAcc(out[i]) - ToAcc(label[i]);
    const A v = sign ? scale * static_cast<A>((diff > A(0)) - (diff < A(0))) : scale * diff;
    StoreAcc(grad + i, req, v);
  }
}

// Per-thread counts, reduced in shared memory, one atomic per block.
template <typename T>
__global__ void CountAboveKernel(const T* x, int64_t n, Acc<T> thresh,
                                 unsigned long long* count) {  // NOLINT(runtime/int)
  __shared__ unsigned long long partial[kThreads];             // NOLINT(runtime/int)
  unsigned long long c = 0;                                    // NOLINT(runtime/int)
  for (int64_t i = GridStart(); i < n; i += GridStride()) c += ToAcc(x[i]) > thresh ? 1 : 0;
  partial[threadIdx.x] = c;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0 && partial[0] != 0) atomicAdd(count, partial[0]);
}

template <typename T>
__global__ void MakeLossGradKernel(T* grad, int64_t n, double grad_scale,
                                   const unsigned long long* count,  // NOLINT(runtime/int)
                                   double norm, int req) {
  using A = Acc<T>;
  const double divisor = count == nullptr ? norm : static_cast<double>(*count > 0 ? *count : 1);
  const A value = static_cast<A>(grad_scale / divisor);
  for (int64_t i = GridStart(); i < n; i += GridStride()) StoreAcc(grad + i, req, value);
}

}  // namespace

bool MakeCopySpace(int ndim, const int64_t* shape, const int64_t* in_stride,
                   const int64_t* out_stride, CopySpace* space) {
  CopySpace s;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0) {  // nothing to copy
      *space = CopySpace();
      space->ndim = 1;
      return true;
    }
  }
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    const int last = s.ndim - 1;
    // The previous kept dim walks over this one when its strides are this one's times its
    // extent in both operands: one dim of the product.
    if (last >= 0 && s.in_stride[last] == in_stride[d] * shape[d] &&
        s.out_stride[last] == out_stride[d] * shape[d]) {
      s.shape[last] *= shape[d];
      s.in_stride[last] = in_stride[d];
      s.out_stride[last] = out_stride[d];
      continue;
    }
    if (s.ndim == kMaxCopyDims) return false;
    s.shape[s.ndim] = shape[d];
    s.in_stride[s.ndim] = in_stride[d];
    s.out_stride[s.ndim] = out_stride[d];
    ++s.ndim;
  }
  if (s.ndim == 0) {  // a single element
    s.ndim = 1;
    s.shape[0] = 1;
    s.in_stride[0] = 1;
    s.out_stride[0] = 1;
  }
  *space = s;
  return true;
}

cudaError_t LaunchStridedCopy(ArrayType type, const CopySpace& space, const void* in, void* out,
                              int req, cudaStream_t stream) {
  if (req == 0) return cudaSuccess;
  int64_t elem = ElemSize(type);
  if (elem == 0 || space.ndim < 0 || space.ndim > kMaxCopyDims) return cudaErrorInvalidValue;
  CopySpace s;
  // Cannot fail: the space has at most kMaxCopyDims dims already.
  MakeCopySpace(space.ndim, space.shape, space.in_stride, space.out_stride, &s);
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.shape[d];
  if (n == 0) return cudaSuccess;

  if (req == 3) {
    TESSERA_ELEM_TYPE_SWITCH(
        type, T,
        if (Fits32(s, n)) {
          StridedAddKernel<T, uint32_t><<<Blocks(n), kThreads, 0, stream>>>(
              s, static_cast<const T*>(in), static_cast<T*>(out), n);
        } else {
          StridedAddKernel<T, int64_t><<<Blocks(n), kThreads, 0, stream>>>(
              s, static_cast<const T*>(in), static_cast<T*>(out), n);
        });
    return cudaGetLastError();
  }

  if (in == out) {
    bool same = true;
    for (int d = 0; d < s.ndim; ++d) same = same && s.in_stride[d] == s.out_stride[d];
    if (same) return cudaSuccess;  // writing every element over itself
  }
  elem = Widen(&s, elem, in, out);
  n = 1;  // in wide elements
  for (int d = 0; d < s.ndim; ++d) n *= s.shape[d];
  switch (elem) {
    case 1:
      return LaunchMove<uint8_t>(s, in, out, n, stream);
    case 2:
      return LaunchMove<uint16_t>(s, in, out, n, stream);
    case 4:
      return LaunchMove<uint32_t>(s, in, out, n, stream);
    case 8:
      return LaunchMove<unsigned long long>(s, in, out, n, stream);  // NOLINT(runtime/int)
    case 16:
      return LaunchMove<uint4>(s, in, out, n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchCopy(ArrayType type, const void* in, void* out, int64_t n, int req,
                       cudaStream_t stream) {
  const int64_t elem = ElemSize(type);
  if (elem == 0) return cudaErrorInvalidValue;
  if (n == 0 || req == 0) return cudaSuccess;
  if (req != 3) {
    if (in == out) return cudaSuccess;
    return cudaMemcpyAsync(out, in, static_cast<size_t>(n * elem), cudaMemcpyDeviceToDevice,
                           stream);
  }
  TESSERA_ELEM_TYPE_SWITCH(type, T,
                           AddKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                               static_cast<const T*>(in), static_cast<T*>(out), n));
  return cudaGetLastError();
}

cudaError_t LaunchZero(ArrayType type, void* out, int64_t n, int req, cudaStream_t stream) {
  const int64_t elem = ElemSize(type);
  if (elem == 0) return cudaErrorInvalidValue;
  if (n == 0 || (req != 1 && req != 2)) return cudaSuccess;
  return cudaMemsetAsync(out, 0, static_cast<size_t>(n * elem), stream);
}

cudaError_t LaunchSum(ArrayType type, const SumInputs& inputs, void* out, int64_t n, SumMode mode,
                      int req, cudaStream_t stream) {
  if (inputs.n < 1 || inputs.n > kMaxSumInputs) return cudaErrorInvalidValue;
  if (n == 0 || (mode == SumMode::kStore && req == 0)) return cudaSuccess;
  TESSERA_ELEM_TYPE_SWITCH(type, T,
                           SumKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                               inputs, static_cast<T*>(out), n, static_cast<int>(mode), req));
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingGather(ArrayType type, ArrayType index_type, const void* data,
                                  int64_t num_indices, const void* weight, int64_t input_dim,
                                  int64_t dim, void* out, int req, cudaStream_t stream) {
  if (req == 0 || num_indices == 0 || dim == 0) return cudaSuccess;
  if (input_dim < 1) return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  TESSERA_ELEM_FLOAT_SWITCH(
      type, T,
      err = GatherT<T>(index_type, data, num_indices, weight, input_dim, dim, out, req, stream));
  return err;
}

cudaError_t LaunchEmbeddingScatterAdd(ArrayType type, ArrayType index_type, const void* data,
                                      int64_t num_indices, const void* out_grad, int64_t input_dim,
                                      int64_t dim, void* acc, cudaStream_t stream) {
  if (num_indices == 0 || dim == 0) return cudaSuccess;
  if (input_dim < 1) return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  TESSERA_ELEM_FLOAT_SWITCH(
      type, T,
      err = ScatterAddT<T>(index_type, data, num_indices, out_grad, input_dim, dim, acc, stream));
  return err;
}

cudaError_t LaunchEmbeddingFinish(ArrayType type, const float* acc, void* grad, int64_t n, int req,
                                  cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  switch (type) {
    case ArrayType::kFloat16:
      FinishKernel<__half>
          <<<Blocks(n), kThreads, 0, stream>>>(acc, static_cast<__half*>(grad), n, req);
      break;
    case ArrayType::kBFloat16:
      FinishKernel<__nv_bfloat16>
          <<<Blocks(n), kThreads, 0, stream>>>(acc, static_cast<__nv_bfloat16*>(grad), n, req);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchSigmoid(ArrayType type, const void* x, void* out, int64_t n, int req,
                          cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  TESSERA_ELEM_FLOAT_SWITCH(type, T,
                            SigmoidKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                                static_cast<const T*>(x), static_cast<T*>(out), n, req));
  return cudaGetLastError();
}

cudaError_t LaunchRegressionGrad(ArrayType type, bool sign, const void* out, const void* label,
                                 void* grad, int64_t n, double scale, int req,
                                 cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  TESSERA_ELEM_FLOAT_SWITCH(type, T,
                            RegressionGradKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                                sign, static_cast<const T*>(out), static_cast<const T*>(label),
                                static_cast<T*>(grad), n, static_cast<Acc<T>>(scale), req));
  return cudaGetLastError();
}

cudaError_t LaunchCountAbove(ArrayType type, const void* x, int64_t n, double thresh,
                             unsigned long long* count, cudaStream_t stream) {  // NOLINT
  if (n == 0) return cudaSuccess;
  TESSERA_ELEM_FLOAT_SWITCH(type, T,
                            CountAboveKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                                static_cast<const T*>(x), n, static_cast<Acc<T>>(thresh), count));
  return cudaGetLastError();
}

cudaError_t LaunchMakeLossGrad(ArrayType type, void* grad, int64_t n, double grad_scale,
                               const unsigned long long* count,  // NOLINT(runtime/int)
                               double norm, int req, cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  TESSERA_ELEM_FLOAT_SWITCH(type, T,
                            MakeLossGradKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                                static_cast<T*>(grad), n, grad_scale, count, norm, req));
  return cudaGetLastError();
}

}  // namespace tessera::ops::cuda

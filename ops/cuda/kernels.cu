// The CUDA kernels behind ops/cuda/kernels.h: one elementwise kernel that switches on a
// MapCode (the switch is uniform across a launch, so it costs a few instructions per element
// against memory-bound loads), its strided form for broadcasting, a block-per-output
// reduction and the float32 helpers of FullyConnected and BatchNorm.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops: enough blocks to fill an H100 several times over, never more than the
// work needs.
constexpr int64_t kMaxBlocks = 4096;

inline int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

template <typename T>
__device__ __forceinline__ void Store(T* out, int req, T v) {
  if (req == 3) {
    *out += v;
  } else if (req != 0) {
    *out = v;
  }
}

template <typename T>
__device__ __forceinline__ T Apply(MapCode code, T a, T b, T c, T s) {
  const T one = T(1);
  switch (code) {
    case MapCode::kNegative:
      return -a;
    case MapCode::kAbs:
      return fabs(a);
    case MapCode::kSquare:
      return a * a;
    case MapCode::kSqrt:
      return sqrt(a);
    case MapCode::kRsqrt:
      return one / sqrt(a);
    case MapCode::kExp:
      return exp(a);
    case MapCode::kLog:
      return log(a);
    case MapCode::kSin:
      return sin(a);
    case MapCode::kCos:
      return cos(a);
    case MapCode::kReciprocal:
      return one / a;
    case MapCode::kPlusScalar:
      return a + s;
    case MapCode::kMinusScalar:
      return a - s;
    case MapCode::kRMinusScalar:
      return s - a;
    case MapCode::kMulScalar:
      return a * s;
    case MapCode::kDivScalar:
      return a / s;
    case MapCode::kRDivScalar:
      return s / a;
    case MapCode::kPowerScalar:
      return pow(a, s);
    case MapCode::kRPowerScalar:
      return pow(s, a);
    case MapCode::kSmoothL1: {
      const T s2 = s * s;
      if (a > one / s2) return a - T(0.5) / s2;
      if (a < -one / s2) return -a - T(0.5) / s2;
      return T(0.5) * a * a * s2;
    }
    case MapCode::kRelu:
      return a > T(0) ? a : T(0);
    case MapCode::kSigmoid:
      return one / (one + exp(-a));
    case MapCode::kTanh:
      return tanh(a);
    // log(1 + e^a) without overflow for large a.
    case MapCode::kSoftRelu:
      return a > T(20) ? a : log1p(exp(a));
    case MapCode::kAbsGrad:
      return b > T(0) ? a : (b < T(0) ? -a : T(0));
    case MapCode::kSquareGrad:
      return a * T(2) * b;
    case MapCode::kLogGrad:
      return a / b;
    case MapCode::kSinGrad:
      return a * cos(b);
    case MapCode::kCosGrad:
      return -a * sin(b);
    case MapCode::kRsqrtGrad:
      return a * (T(-0.5) / (b * sqrt(b)));
    case MapCode::kSqrtGrad:
      return a * (T(0.5) / b);
    case MapCode::kExpGrad:
      return a * b;
    case MapCode::kReciprocalGrad:
      return a * (-b * b);
    case MapCode::kRDivGrad:
      return -a * s / (b * b);
    case MapCode::kPowerGrad:
      return a * s * pow(b, s - one);
    case MapCode::kRPowerGrad:
      return a * b * s;
    case MapCode::kSmoothL1Grad: {
      const T s2 = s * s;
      if (b > one / s2) return a;
      if (b < -one / s2) return -a;
      return a * b * s2;
    }
    case MapCode::kSoftReluGrad:
      return a * (one - exp(-b));
    case MapCode::kAdd:
      return a + b;
    case MapCode::kSub:
      return a - b;
    case MapCode::kMul:
      return a * b;
    case MapCode::kDiv:
      return a / b;
    case MapCode::kMaximum:
      return a > b ? a : b;
    case MapCode::kMinimum:
      return a < b ? a : b;
    case MapCode::kPower:
      return pow(a, b);
    case MapCode::kDivRhsGrad:
      return -a * b / (c * c);
    case MapCode::kGeMask:
      return b >= c ? a : T(0);
    case MapCode::kLtMask:
      return b < c ? a : T(0);
    case MapCode::kLeMask:
      return b <= c ? a : T(0);
    case MapCode::kGtMask:
      return b > c ? a : T(0);
    case MapCode::kEqMask:
      return b == c ? a : T(0);
    case MapCode::kPowerLhsGrad:
      return a * c * pow(b, c - one);
    case MapCode::kPowerRhsGrad:
      return a * pow(b, c) * log(b);
    case MapCode::kMulDiv:
      return a * b / c;
  }
  return T(0);
}

template <typename T>
__global__ void MapKernel(MapCode code, const T* a, const T* b, const T* c, T* out, int64_t n, T s,
                          int req) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    // Read every operand before the store: out may alias any of them.
    const T va = a ? a[i] : T(0);
    const T vb = b ? b[i] : T(0);
    const T vc = c ? c[i] : T(0);
    Store(out + i, req, Apply(code, va, vb, vc, s));
  }
}

template <typename T>
__global__ void StridedMapKernel(MapCode code, StridedSpace space, const T* a, const T* b,
                                 const T* c, T* out, int64_t n, T s, int req) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, oa = 0, ob = 0, oc = 0;
    for (int d = space.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % space.shape[d];
      rest /= space.shape[d];
      oa += idx * space.stride[0][d];
      ob += idx * space.stride[1][d];
      oc += idx * space.stride[2][d];
    }
    const T va = a ? a[oa] : T(0);
    const T vb = b ? b[ob] : T(0);
    const T vc = c ? c[oc] : T(0);
    Store(out + i, req, Apply(code, va, vb, vc, s));
  }
}

__device__ __forceinline__ int64_t Offset(const StridedSpace& space, int64_t i) {
  int64_t off = 0;
  for (int d = space.ndim - 1; d >= 0; --d) {
    off += (i % space.shape[d]) * space.stride[0][d];
    i /= space.shape[d];
  }
  return off;
}

template <typename T>
__device__ __forceinline__ T Combine(ReduceCode code, T x, T y) {
  switch (code) {
    case ReduceCode::kSum:
      return x + y;
    case ReduceCode::kMax:
      return x > y ? x : y;
    case ReduceCode::kMin:
      return x < y ? x : y;
    case ReduceCode::kProd:
      return x * y;
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T Identity(ReduceCode code) {
  switch (code) {
    case ReduceCode::kSum:
      return T(0);
    case ReduceCode::kMax:
      return -INFINITY;
    case ReduceCode::kMin:
      return INFINITY;
    case ReduceCode::kProd:
      return T(1);
  }
  return T(0);
}

// One block per output element (grid-stride over outputs): the threads stride over the
// reduced positions and combine in shared memory. Serves full reductions (one output) and
// per-row ones alike without a second kernel.
template <typename T>
__global__ void ReduceKernel(ReduceCode code, StridedSpace kept, StridedSpace reduced,
                             int64_t out_size, int64_t red_size, const T* in, T* out, T scale,
                             int req) {
  __shared__ T partial[kThreads];
  for (int64_t o = blockIdx.x; o < out_size; o += gridDim.x) {
    const int64_t base = Offset(kept, o);
    T acc = Identity<T>(code);
    for (int64_t r = threadIdx.x; r < red_size; r += blockDim.x) {
      acc = Combine(code, acc, in[base + Offset(reduced, r)]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) {
        partial[threadIdx.x] = Combine(code, partial[threadIdx.x], partial[threadIdx.x + width]);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) Store(out + o, req, partial[0] * scale);
    __syncthreads();
  }
}

__global__ void SumRowsKernel(const float* in, float* out, int64_t rows, int64_t cols, int req) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < cols;
       j += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0;
    for (int64_t r = 0; r < rows; ++r) acc += in[r * cols + j];
    Store(out + j, req, acc);
  }
}

__global__ void AddBiasRowsKernel(float* out, const float* bias, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += bias[i % cols];
  }
}

__global__ void FillKernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

__global__ void BatchNormFinishKernel(const float* save_mean, const float* save_invstd, int64_t c,
                                      float eps, float momentum, float* mean_out, int mean_req,
                                      float* var_out, int var_req, float* moving_mean,
                                      float* moving_var) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < c;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float mean = save_mean[i];
    const float invstd = save_invstd[i];
    const float var = 1.0f / (invstd * invstd) - eps;
    Store(mean_out + i, mean_req, mean);
    Store(var_out + i, var_req, var);
    moving_mean[i] = moving_mean[i] * momentum + mean * (1.0f - momentum);
    moving_var[i] = moving_var[i] * momentum + var * (1.0f - momentum);
  }
}

__global__ void InvStdKernel(const float* var, float eps, float* invstd, int64_t c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < c;
       i += int64_t{gridDim.x} * blockDim.x) {
    invstd[i] = rsqrtf(var[i] + eps);
  }
}

// One block per channel: dx elementwise, dgamma / dbeta reduced in shared memory.
__global__ void BatchNormGlobalBackwardKernel(const float* g, const float* x, const float* gamma,
                                              const float* mean, const float* invstd, int64_t n,
                                              int64_t c, int64_t inner, float* dx, int dx_req,
                                              float* dgamma, int dgamma_req, float* dbeta,
                                              int dbeta_req) {
  __shared__ float part_g[kThreads];
  __shared__ float part_gx[kThreads];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const float scale = (gamma ? gamma[ch] : 1.0f) * invstd[ch];
    float sum_g = 0, sum_gx = 0;
    for (int64_t k = threadIdx.x; k < n * inner; k += blockDim.x) {
      const int64_t idx = (k / inner) * c * inner + ch * inner + k % inner;
      const float gv = g[idx];
      sum_g += gv;
      sum_gx += gv * (x[idx] - mean[ch]) * invstd[ch];
      if (dx) Store(dx + idx, dx_req, gv * scale);
    }
    part_g[threadIdx.x] = sum_g;
    part_gx[threadIdx.x] = sum_gx;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) {
        part_g[threadIdx.x] += part_g[threadIdx.x + width];
        part_gx[threadIdx.x] += part_gx[threadIdx.x + width];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (dgamma) Store(dgamma + ch, dgamma_req, part_gx[0]);
      if (dbeta) Store(dbeta + ch, dbeta_req, part_g[0]);
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t LaunchMap(MapCode code, KernelType type, const void* a, const void* b, const void* c,
                      void* out, int64_t n, double s, int req, cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  if (type == KernelType::kFloat32) {
    MapKernel<float><<<Blocks(n), kThreads, 0, stream>>>(
        code, static_cast<const float*>(a), static_cast<const float*>(b),
        static_cast<const float*>(c), static_cast<float*>(out), n, static_cast<float>(s), req);
  } else {
    MapKernel<double><<<Blocks(n), kThreads, 0, stream>>>(
        code, static_cast<const double*>(a), static_cast<const double*>(b),
        static_cast<const double*>(c), static_cast<double*>(out), n, s, req);
  }
  return cudaGetLastError();
}

cudaError_t LaunchStridedMap(MapCode code, KernelType type, const StridedSpace& space,
                             const void* a, const void* b, const void* c, void* out, double s,
                             int req, cudaStream_t stream) {
  int64_t n = 1;
  for (int d = 0; d < space.ndim; ++d) n *= space.shape[d];
  if (n == 0 || req == 0) return cudaSuccess;
  if (type == KernelType::kFloat32) {
    StridedMapKernel<float><<<Blocks(n), kThreads, 0, stream>>>(
        code, space, static_cast<const float*>(a), static_cast<const float*>(b),
        static_cast<const float*>(c), static_cast<float*>(out), n, static_cast<float>(s), req);
  } else {
    StridedMapKernel<double><<<Blocks(n), kThreads, 0, stream>>>(
        code, space, static_cast<const double*>(a), static_cast<const double*>(b),
        static_cast<const double*>(c), static_cast<double*>(out), n, s, req);
  }
  return cudaGetLastError();
}

cudaError_t LaunchReduce(ReduceCode code, KernelType type, const StridedSpace& kept,
                         const StridedSpace& reduced, const void* in, void* out, double scale,
                         int req, cudaStream_t stream) {
  int64_t out_size = 1, red_size = 1;
  for (int d = 0; d < kept.ndim; ++d) out_size *= kept.shape[d];
  for (int d = 0; d < reduced.ndim; ++d) red_size *= reduced.shape[d];
  if (out_size == 0 || req == 0) return cudaSuccess;
  const int blocks = static_cast<int>(out_size < 65535 ? out_size : 65535);
  if (type == KernelType::kFloat32) {
    ReduceKernel<float><<<blocks, kThreads, 0, stream>>>(
        code, kept, reduced, out_size, red_size, static_cast<const float*>(in),
        static_cast<float*>(out), static_cast<float>(scale), req);
  } else {
    ReduceKernel<double><<<blocks, kThreads, 0, stream>>>(code, kept, reduced, out_size, red_size,
                                                          static_cast<const double*>(in),
                                                          static_cast<double*>(out), scale, req);
  }
  return cudaGetLastError();
}

cudaError_t LaunchSumRows(const float* in, float* out, int64_t rows, int64_t cols, int req,
                          cudaStream_t stream) {
  if (cols == 0 || req == 0) return cudaSuccess;
  SumRowsKernel<<<Blocks(cols), kThreads, 0, stream>>>(in, out, rows, cols, req);
  return cudaGetLastError();
}

cudaError_t LaunchAddBiasRows(float* out, const float* bias, int64_t rows, int64_t cols,
                              cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  AddBiasRowsKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(out, bias, rows * cols, cols);
  return cudaGetLastError();
}

cudaError_t LaunchFill(float* out, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormFinish(const float* save_mean, const float* save_invstd, int64_t c,
                                  float eps, float momentum, float* mean_out, int mean_req,
                                  float* var_out, int var_req, float* moving_mean,
                                  float* moving_var, cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  BatchNormFinishKernel<<<Blocks(c), kThreads, 0, stream>>>(save_mean, save_invstd, c, eps,
                                                            momentum, mean_out, mean_req, var_out,
                                                            var_req, moving_mean, moving_var);
  return cudaGetLastError();
}

cudaError_t LaunchInvStd(const float* var, float eps, float* invstd, int64_t c,
                         cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  InvStdKernel<<<Blocks(c), kThreads, 0, stream>>>(var, eps, invstd, c);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormGlobalBackward(const float* g, const float* x, const float* gamma,
                                          const float* mean, const float* invstd, int64_t n,
                                          int64_t c, int64_t inner, float* dx, int dx_req,
                                          float* dgamma, int dgamma_req, float* dbeta,
                                          int dbeta_req, cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  const int blocks = static_cast<int>(c < 65535 ? c : 65535);
  BatchNormGlobalBackwardKernel<<<blocks, kThreads, 0, stream>>>(
      g, x, gamma, mean, invstd, n, c, inner, dx, dx_req, dgamma, dgamma_req, dbeta, dbeta_req);
  return cudaGetLastError();
}

}  // namespace tessera::ops::cuda

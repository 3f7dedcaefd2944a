// The CUDA kernels behind ops/cuda/kernels.h: the float32 helpers of FullyConnected and
// BatchNorm.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ndarray/cuda/launch_util.cuh"
#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {
namespace {

using ::tessera::cuda::Blocks;
using ::tessera::cuda::kThreads;
using ::tessera::cuda::Store;

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

// The CUDA kernels of ops/cuda behind plain launch functions. This header is what the .cu file
// and the operator .cc files share: it holds no CUDA syntax and no absl, so nvcc compiles the
// kernels without the rest of Tessera's headers and g++ compiles the operators (Status, cuDNN,
// cuBLAS) without nvcc.
//
// Every launcher enqueues on `stream` and returns cudaGetLastError() of the launch (errors of
// the kernel itself surface at the next synchronization). `req` is an OpReqType value
// (0 null, 1 write, 2 write in place, 3 add to). Pointers are device pointers; the elementwise
// ones may alias each other exactly (in place), never partially.
//
// Thread safety: the launchers keep no state.
#ifndef TESSERA_OPS_CUDA_KERNELS_H_
#define TESSERA_OPS_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ndarray/cuda/tensor_kernels.h"

namespace tessera::ops::cuda {

// The generic tensor kernels, under the names the operators have always used.
using ::tessera::cuda::KernelType;
using ::tessera::cuda::kMaxDims;
using ::tessera::cuda::LaunchMap;
using ::tessera::cuda::LaunchReduce;
using ::tessera::cuda::LaunchStridedMap;
using ::tessera::cuda::MapCode;
using ::tessera::cuda::ReduceCode;
using ::tessera::cuda::ReduceScratchBytes;
using ::tessera::cuda::StridedSpace;


// float32 helpers of the neural-network operators.

// out[r * cols + j] (per req) = sum over r of in[r * cols + j], rows x cols input.
cudaError_t LaunchSumRows(const float* in, float* out, int64_t rows, int64_t cols, int req,
                          cudaStream_t stream);
// out[r * cols + j] += bias[j].
cudaError_t LaunchAddBiasRows(float* out, const float* bias, int64_t rows, int64_t cols,
                              cudaStream_t stream);
cudaError_t LaunchFill(float* out, int64_t n, float value, cudaStream_t stream);

// BatchNorm: from cuDNN's saved (mean, 1/sqrt(var + eps)) of C channels, writes the mean and
// the biased variance to the outputs (per req) and updates the moving averages:
// moving = moving * momentum + batch * (1 - momentum).
cudaError_t LaunchBatchNormFinish(const float* save_mean, const float* save_invstd, int64_t c,
                                  float eps, float momentum, float* mean_out, int mean_req,
                                  float* var_out, int var_req, float* moving_mean,
                                  float* moving_var, cudaStream_t stream);
// invstd[i] = 1 / sqrt(var[i] + eps).
cudaError_t LaunchInvStd(const float* var, float eps, float* invstd, int64_t c,
                         cudaStream_t stream);
// BatchNorm backward with fixed statistics (use_global_stats) on (n, c, inner) data:
// dx = g * gamma * invstd, dgamma = sum g * (x - mean) * invstd, dbeta = sum g, each per req
// (a null pointer skips that gradient); gamma null means ones.
cudaError_t LaunchBatchNormGlobalBackward(const float* g, const float* x, const float* gamma,
                                          const float* mean, const float* invstd, int64_t n,
                                          int64_t c, int64_t inner, float* dx, int dx_req,
                                          float* dgamma, int dgamma_req, float* dbeta,
                                          int dbeta_req, cudaStream_t stream);

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_KERNELS_H_

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

namespace tessera::ops::cuda {

// The scalar functions of the elementwise kernels. Operands are a, b, c (in that order) and
// the scalar s; "g" is an output gradient, "x" an input, "y" an output value.
enum class MapCode : int {
  // f(a = x, s)
  kNegative,
  kAbs,
  kSquare,
  kSqrt,
  kRsqrt,
  kExp,
  kLog,
  kSin,
  kCos,
  kReciprocal,
  kPlusScalar,
  kMinusScalar,
  kRMinusScalar,
  kMulScalar,  // also every gradient that is g times a constant (s)
  kDivScalar,
  kRDivScalar,
  kPowerScalar,
  kRPowerScalar,
  kSmoothL1,  // s = sigma
  kRelu,
  kSigmoid,
  kTanh,
  kSoftRelu,
  // f(a = g, b = x or y, s)
  kAbsGrad,         // b = x
  kSquareGrad,      // b = x
  kLogGrad,         // b = x
  kSinGrad,         // b = x
  kCosGrad,         // b = x
  kRsqrtGrad,       // b = x
  kSqrtGrad,        // b = y
  kExpGrad,         // b = y
  kReciprocalGrad,  // b = y
  kRDivGrad,        // b = x
  kPowerGrad,       // b = x
  kRPowerGrad,      // b = y, s = ln(scalar)
  kSmoothL1Grad,    // b = x, s = sigma
  kSoftReluGrad,    // b = y
  // f(a, b): binary arithmetic; kMul is also g * other and kDiv g / rhs
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  kPower,
  // f(a = g, b, c): gradients of binary ops
  kDivRhsGrad,    // -g * b / (c * c), b = lhs, c = rhs
  kGeMask,        // g * (b >= c)
  kLtMask,        // g * (b < c)
  kLeMask,        // g * (b <= c)
  kGtMask,        // g * (b > c)
  kEqMask,        // g * (b == c)
  kPowerLhsGrad,  // g * c * b^(c - 1)
  kPowerRhsGrad,  // g * b^c * ln(b)
  kMulDiv,        // g * b / c
};

// Element types the elementwise kernels take.
enum class KernelType : int { kFloat32, kFloat64 };

// out[i] (per req) = f(a[i], b[i], c[i], s) for i < n; unused operands may be null.
cudaError_t LaunchMap(MapCode code, KernelType type, const void* a, const void* b, const void* c,
                      void* out, int64_t n, double s, int req, cudaStream_t stream);

// Index spaces of up to kMaxDims dims over operands with their own element strides (0 along
// a broadcast dim): the strided forms of LaunchMap and the reductions use them.
inline constexpr int kMaxDims = 8;
struct StridedSpace {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[3][kMaxDims] = {};  // operands a, b, c
};

// As LaunchMap with out contiguous over `space` and a, b, c read through their strides.
cudaError_t LaunchStridedMap(MapCode code, KernelType type, const StridedSpace& space,
                             const void* a, const void* b, const void* c, void* out, double s,
                             int req, cudaStream_t stream);

enum class ReduceCode : int { kSum, kMax, kMin, kProd };

// out[o] (per req) = scale * reduce over `reduced` of in[offset(o) + offset(r)], where o runs
// over `kept` (contiguous out) and both spaces use stride[0] into `in`.
cudaError_t LaunchReduce(ReduceCode code, KernelType type, const StridedSpace& kept,
                         const StridedSpace& reduced, const void* in, void* out, double scale,
                         int req, cudaStream_t stream);

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

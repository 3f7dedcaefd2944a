// Generic tensor kernels on the GPU behind plain launch functions: elementwise maps (plain and
// strided, for broadcasting) over a MapCode, reductions, fills, casts and Philox sampling. NDArray's device math
// (ndarray/cuda/device_math.h) and the CUDA operators (ops/cuda) share them. This header
// holds no CUDA syntax and no absl, so nvcc compiles the kernels without the rest of
// Tessera's headers and g++ compiles the callers without nvcc.
//
// Every launcher enqueues on `stream` and returns cudaGetLastError() of the launch (errors of
// the kernel itself surface at the next synchronization). `req` is an OpReqType value
// (0 null, 1 write, 2 write in place, 3 add to). Pointers are device pointers; the elementwise
// ones may alias each other exactly (in place), never partially.
//
// Thread safety: the launchers keep no state.
#ifndef TESSERA_NDARRAY_CUDA_TENSOR_KERNELS_H_
#define TESSERA_NDARRAY_CUDA_TENSOR_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/philox.h"

namespace tessera::cuda {

// Element types, with DType's values (core/dtype.h) so a host caller converts by a cast.
enum class ElemType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kUInt8 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kInt64 = 6,
  kBFloat16 = 12,
};

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
  kMaximum,  // NaN in either operand gives NaN, as the CPU's math::BinaryOp::kMax
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
  // f(a = x, s): the remaining scalar forms of NDArray arithmetic
  kMaximumScalar,  // max(x, s)
  kMinimumScalar,  // min(x, s)
};

// Element types the elementwise kernels and reductions take. The half types are loaded into
// float, computed there and rounded on store, as the CPU kernels do.
enum class KernelType : int { kFloat32, kFloat64, kFloat16, kBFloat16 };

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

// Scratch bytes LaunchReduce needs for these spaces (0 when it needs none): a reduction with
// few outputs over many elements is split across blocks (every SM busy, not one per output)
// and the partial results are combined by a second pass.
size_t ReduceScratchBytes(KernelType type, const StridedSpace& kept, const StridedSpace& reduced);

// out[o] (per req) = scale * reduce over `reduced` of in[offset(o) + offset(r)], where o runs
// over `kept` (contiguous out) and both spaces use stride[0] into `in`. Sums accumulate in
// float (float64 for float64 data). `scratch` holds ReduceScratchBytes() bytes of device
// memory (may be null when that is 0); it is free again once the stream passes the launch.
cudaError_t LaunchReduce(ReduceCode code, KernelType type, const StridedSpace& kept,
                         const StridedSpace& reduced, const void* in, void* out, double scale,
                         int req, void* scratch, cudaStream_t stream);

// Every element of out (n elements of `type`) = value, converted as the CPU's math::Fill does
// (integers saturate, NaN gives 0).
cudaError_t LaunchFill(ElemType type, void* out, int64_t n, double value, cudaStream_t stream);

// out[i] = in[i] converted from `from` to `to`, as the CPU's math::Cast.
cudaError_t LaunchCast(ElemType from, const void* in, ElemType to, void* out, int64_t n,
                       cudaStream_t stream);

// out (per req, kWriteTo or kAddTo) = in, n elements of a floating-point `type`: the kAddTo of
// a copy (a plain write is cudaMemcpyAsync).
cudaError_t LaunchAddTo(KernelType type, const void* in, void* out, int64_t n,
                        cudaStream_t stream);

// Random samples with the CPU's draws (ndarray/random.cc): element i of a uniform in [a, b)
// takes output i of the stream (float types) or outputs 2i, 2i+1 (float64); a normal with
// mean a and std b takes outputs 4i..4i+3. `gen` is the generator at its current position;
// the caller advances it by SampleOutputs() afterwards.
enum class SampleCode : int { kUniform, kNormal };
int64_t SampleOutputs(SampleCode code, KernelType type, int64_t n);
cudaError_t LaunchSample(SampleCode code, KernelType type, const engine::PhiloxRandom& gen,
                         double a, double b, void* out, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda

#endif  // TESSERA_NDARRAY_CUDA_TENSOR_KERNELS_H_

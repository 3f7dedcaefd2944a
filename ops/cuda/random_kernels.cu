// The CUDA kernels behind ops/cuda/random_kernels.h: Dropout and LeakyReLU. Arithmetic follows
// the CPU kernels of ops/array expression by expression (constants converted to the element
// type the same way), and where the CPU's result must be reproduced bit for bit - the random
// decisions and slopes - products and sums are rounded one at a time (__fmul_rn /
// __fadd_rn), which keeps nvcc from fusing them into an FMA the CPU does not use.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <numbers>

#include "engine/philox.h"
#include "ndarray/cuda/launch_util.cuh"
#include "ops/cuda/random_kernels.h"

namespace tessera::ops::cuda {
namespace {

using ::tessera::cuda::Blocks;
using ::tessera::cuda::GridStart;
using ::tessera::cuda::GridStride;
using ::tessera::cuda::kThreads;
using ::tessera::cuda::Store;

// ops/array/leaky_relu.cc's constants, computed by the same expressions.
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluLambda = 1.0507009873554804934193349852946;
constexpr double kInvSqrt2 = 1 / std::numbers::sqrt2;
constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi * kInvSqrt2;

// The uniform PhiloxRandom::NextUniform returns at stream position `position`: the top 24
// bits of that 32-bit output, scaled by 2^-24.
__device__ __forceinline__ float UniformAt(const engine::PhiloxRandom& gen, uint64_t position) {
  const uint32_t bits = gen.Block(position / 4).v[position % 4];
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double MulRn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float AddRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double AddRn(double a, double b) { return __dadd_rn(a, b); }

// ---- Dropout ----

template <typename T>
__global__ void DropoutKernel(const T* x, T* y, int y_req, T* mask, int64_t n, DrawMap map,
                              engine::PhiloxRandom gen, uint64_t base, double p, T scale) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    int64_t rest = i, draw = 0;
    for (int d = map.ndim - 1; d >= 0; --d) {
      draw += rest % map.shape[d] * map.draw_stride[d];
      rest /= map.shape[d];
    }
    // The CPU's `rng->NextUniform() >= p`: a float compared as a double.
    const bool keep = UniformAt(gen, base + static_cast<uint64_t>(draw)) >= p;
    const T v = keep ? MulRn(x[i], scale) : T(0);  // read before y[i] is written (in place)
    Store(y + i, y_req, v);
    if (mask != nullptr) mask[i] = keep ? scale : T(0);
  }
}

template <typename T>
__global__ void DropoutIdentityKernel(const T* x, T* y, int y_req, T* mask, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Store(y + i, y_req, x[i]);
    if (mask != nullptr) mask[i] = T(1);
  }
}

// ---- LeakyReLU ----

template <typename T>
__device__ __forceinline__ T LeakyForward(const LeakyArgs& a, T v, const T* gamma, int64_t i) {
  switch (a.kind) {
    case LeakyKind::kLeaky:
      return v > T(0) ? v : T(a.slope) * v;
    case LeakyKind::kElu:
      return v > T(0) ? v : T(a.slope) * (exp(v) - T(1));
    case LeakyKind::kSelu:
      return T(kSeluLambda) * (v > T(0) ? v : T(kSeluAlpha) * (exp(v) - T(1)));
    case LeakyKind::kGelu:
      return T(0.5) * v * (T(1) + erf(v * T(kInvSqrt2)));
    case LeakyKind::kPReLU: {
      const T g = gamma[(i / a.inner) % a.channels];
      return v > T(0) ? v : g * v;
    }
    case LeakyKind::kRReLU:  // its own kernel
      break;
  }
  return v;
}

// `v` is s[i]: x when s_is_input, else y (see random_kernels.h).
template <typename T>
__device__ __forceinline__ T LeakyBackward(const LeakyArgs& a, bool s_is_input, T g, T v,
                                           const T* extra, int64_t i) {
  switch (a.kind) {
    case LeakyKind::kLeaky:
      return v > T(0) ? g : T(a.slope) * g;
    case LeakyKind::kElu:
      // Below 0 from y: y + slope = slope * exp(x).
      if (v > T(0)) return g;
      return g * (s_is_input ? T(a.slope) * exp(v) : v + T(a.slope));
    case LeakyKind::kSelu:
      // Below 0, dy/dx = lambda * alpha * exp(x) = y + lambda * alpha.
      return v > T(0) ? T(kSeluLambda) * g : g * (v + T(kSeluLambda * kSeluAlpha));
    case LeakyKind::kGelu: {
      // d/dx x Phi(x) = Phi(x) + x phi(x).
      const T cdf = T(0.5) * (T(1) + erf(v * T(kInvSqrt2)));
      const T pdf = exp(T(-0.5) * v * v) * T(kInvSqrt2Pi);
      return g * (cdf + v * pdf);
    }
    case LeakyKind::kRReLU:
      return v > T(0) ? g : extra[i] * g;
    case LeakyKind::kPReLU:
      return v > T(0) ? g : extra[(i / a.inner) % a.channels] * g;
  }
  return g;
}

template <typename T>
__global__ void LeakyForwardKernel(LeakyArgs a, const T* x, const T* gamma, T* y, int req,
                                   int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Store(y + i, req, LeakyForward(a, x[i], gamma, i));
  }
}

template <typename T>
__global__ void RReluKernel(const T* x, T* y, int req, T* mask, int64_t n, T lower, T upper,
                            bool training, engine::PhiloxRandom gen, uint64_t base) {
  // The CPU's slopes: lo + (hi - lo) * u rounded step by step, or the mean (lo + hi) / 2.
  const T range = upper - lower;
  const T mean = (lower + upper) / T(2);
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const T s =
        training ? AddRn(lower, MulRn(range, static_cast<T>(UniformAt(gen, base + i)))) : mean;
    const T v = x[i];  // read before y[i] is written (in place)
    Store(y + i, req, v > T(0) ? v : MulRn(s, v));
    if (mask != nullptr) mask[i] = s;
  }
}

template <typename T>
__global__ void LeakyBackwardKernel(LeakyArgs a, bool s_is_input, const T* og, const T* s,
                                    const T* extra, T* dx, int req, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Store(dx + i, req, LeakyBackward(a, s_is_input, og[i], s[i], extra, i));
  }
}

// One block per channel; double partial sums reduced in shared memory.
template <typename T>
__global__ void PReluGammaGradKernel(const T* og, const T* x, int64_t outer, int64_t channels,
                                     int64_t inner, T* dgamma, int req) {
  __shared__ double part[kThreads];
  const int64_t per_channel = outer * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double sum = 0;
    for (int64_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
      const int64_t idx = ((k / inner) * channels + c) * inner + k % inner;
      const T v = x[idx];
      if (v <= T(0)) sum += static_cast<double>(v) * static_cast<double>(og[idx]);
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) part[threadIdx.x] += part[threadIdx.x + width];
      __syncthreads();
    }
    if (threadIdx.x == 0) Store(dgamma + c, req, static_cast<T>(part[0]));
    __syncthreads();
  }
}

}  // namespace

// Each launcher instantiates its kernel for the element type: float32 or float64 (the
// operators refuse the others before launching; anything else is an invalid value here).
#define TESSERA_LAUNCH_TYPED(type, T, launch)    \
  do {                                           \
    if ((type) == KernelType::kFloat32) {        \
      using T = float;                           \
      launch;                                    \
    } else if ((type) == KernelType::kFloat64) { \
      using T = double;                          \
      launch;                                    \
    } else {                                     \
      return cudaErrorInvalidValue;              \
    }                                            \
  } while (false)

cudaError_t LaunchDropout(KernelType type, const void* x, void* y, int y_req, void* mask, int64_t n,
                          const DrawMap& map, const engine::PhiloxRandom& gen, double p,
                          double scale, cudaStream_t stream) {
  if (n == 0 || (y_req == 0 && mask == nullptr)) return cudaSuccess;
  const uint64_t base = gen.position();
  TESSERA_LAUNCH_TYPED(type, T,
                       (DropoutKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                           static_cast<const T*>(x), static_cast<T*>(y), y_req,
                           static_cast<T*>(mask), n, map, gen, base, p, static_cast<T>(scale))));
  return cudaGetLastError();
}

cudaError_t LaunchDropoutIdentity(KernelType type, const void* x, void* y, int y_req, void* mask,
                                  int64_t n, cudaStream_t stream) {
  if (n == 0 || (y_req == 0 && mask == nullptr)) return cudaSuccess;
  TESSERA_LAUNCH_TYPED(
      type, T,
      (DropoutIdentityKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), y_req, static_cast<T*>(mask), n)));
  return cudaGetLastError();
}

cudaError_t LaunchLeakyReluForward(KernelType type, const LeakyArgs& args, const void* x,
                                   const void* gamma, void* y, int req, int64_t n,
                                   cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  TESSERA_LAUNCH_TYPED(type, T,
                       (LeakyForwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                           args, static_cast<const T*>(x), static_cast<const T*>(gamma),
                           static_cast<T*>(y), req, n)));
  return cudaGetLastError();
}

cudaError_t LaunchRReluForward(KernelType type, float lower, float upper, bool training,
                               const engine::PhiloxRandom& gen, const void* x, void* y, int req,
                               void* mask, int64_t n, cudaStream_t stream) {
  if (n == 0 || (req == 0 && mask == nullptr)) return cudaSuccess;
  const uint64_t base = gen.position();
  TESSERA_LAUNCH_TYPED(type, T,
                       (RReluKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                           static_cast<const T*>(x), static_cast<T*>(y), req, static_cast<T*>(mask),
                           n, static_cast<T>(lower), static_cast<T>(upper), training, gen, base)));
  return cudaGetLastError();
}

cudaError_t LaunchLeakyReluBackward(KernelType type, const LeakyArgs& args, bool s_is_input,
                                    const void* og, const void* s, const void* extra, void* dx,
                                    int req, int64_t n, cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  TESSERA_LAUNCH_TYPED(type, T,
                       (LeakyBackwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
                           args, s_is_input, static_cast<const T*>(og), static_cast<const T*>(s),
                           static_cast<const T*>(extra), static_cast<T*>(dx), req, n)));
  return cudaGetLastError();
}

cudaError_t LaunchPReluGammaGrad(KernelType type, const void* og, const void* x, int64_t outer,
                                 int64_t channels, int64_t inner, void* dgamma, int req,
                                 cudaStream_t stream) {
  if (channels == 0 || req == 0) return cudaSuccess;
  const int blocks = static_cast<int>(channels < 4096 ? channels : 4096);
  TESSERA_LAUNCH_TYPED(type, T,
                       (PReluGammaGradKernel<T><<<blocks, kThreads, 0, stream>>>(
                           static_cast<const T*>(og), static_cast<const T*>(x), outer, channels,
                           inner, static_cast<T*>(dgamma), req)));
  return cudaGetLastError();
}

#undef TESSERA_LAUNCH_TYPED

}  // namespace tessera::ops::cuda

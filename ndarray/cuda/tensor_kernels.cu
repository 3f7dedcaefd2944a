// The kernels behind ndarray/cuda/tensor_kernels.h: one elementwise kernel that switches on a
// MapCode (the switch is uniform across a launch, so it costs a few instructions per element
// against memory-bound loads), its strided form for broadcasting, the reductions, fills,
// casts and Philox sampling. Storage types T load into an arithmetic type (Acc<T>: float for
// the half types) and round back on store.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cuda/std/limits>
#include <limits>
#include <type_traits>

#include "engine/philox.h"
#include "ndarray/cuda/element_types.cuh"
#include "ndarray/cuda/launch_util.cuh"
#include "ndarray/cuda/tensor_kernels.h"

namespace tessera::cuda {
namespace {

// Calls f with a null pointer of the storage type of `type` (for template deduction).
template <typename F>
cudaError_t ForKernelType(KernelType type, F f) {
  switch (type) {
    case KernelType::kFloat32:
      return f(static_cast<float*>(nullptr));
    case KernelType::kFloat64:
      return f(static_cast<double*>(nullptr));
    case KernelType::kFloat16:
      return f(static_cast<__half*>(nullptr));
    case KernelType::kBFloat16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
  }
  return cudaErrorInvalidValue;
}

// ---- elementwise maps ----

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
      return isnan(b) ? b : (a < b ? b : a);
    case MapCode::kMinimum:
      return isnan(b) ? b : (b < a ? b : a);
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
    case MapCode::kMaximumScalar:
      return isnan(s) ? s : (a < s ? s : a);
    case MapCode::kMinimumScalar:
      return isnan(s) ? s : (s < a ? s : a);
  }
  return T(0);
}

template <typename T>
__global__ void MapKernel(MapCode code, const T* a, const T* b, const T* c, T* out, int64_t n,
                          Acc<T> s, int req) {
  using A = Acc<T>;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    // Read every operand before the store: out may alias any of them.
    const A va = a ? ToAcc(a[i]) : A(0);
    const A vb = b ? ToAcc(b[i]) : A(0);
    const A vc = c ? ToAcc(c[i]) : A(0);
    StoreAcc(out + i, req, Apply(code, va, vb, vc, s));
  }
}

template <typename T>
__global__ void StridedMapKernel(MapCode code, StridedSpace space, const T* a, const T* b,
                                 const T* c, T* out, int64_t n, Acc<T> s, int req) {
  using A = Acc<T>;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    int64_t rest = i, oa = 0, ob = 0, oc = 0;
    for (int d = space.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % space.shape[d];
      rest /= space.shape[d];
      oa += idx * space.stride[0][d];
      ob += idx * space.stride[1][d];
      oc += idx * space.stride[2][d];
    }
    const A va = a ? ToAcc(a[oa]) : A(0);
    const A vb = b ? ToAcc(b[ob]) : A(0);
    const A vc = c ? ToAcc(c[oc]) : A(0);
    StoreAcc(out + i, req, Apply(code, va, vb, vc, s));
  }
}

template <typename T>
__global__ void AddToKernel(const T* in, T* out, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) StoreAcc(out + i, 3, ToAcc(in[i]));
}

// ---- reductions ----

__device__ __forceinline__ int64_t Offset(const StridedSpace& space, int64_t i) {
  int64_t off = 0;
  for (int d = space.ndim - 1; d >= 0; --d) {
    off += (i % space.shape[d]) * space.stride[0][d];
    i /= space.shape[d];
  }
  return off;
}

template <typename A>
__device__ __forceinline__ A Combine(ReduceCode code, A x, A y) {
  switch (code) {
    case ReduceCode::kSum:
      return x + y;
    case ReduceCode::kMax:
      return isnan(y) ? y : (x < y ? y : x);
    case ReduceCode::kMin:
      return isnan(y) ? y : (y < x ? y : x);
    case ReduceCode::kProd:
      return x * y;
  }
  return x;
}

template <typename A>
__device__ __forceinline__ A Identity(ReduceCode code) {
  switch (code) {
    case ReduceCode::kSum:
      return A(0);
    case ReduceCode::kMax:
      return -INFINITY;
    case ReduceCode::kMin:
      return INFINITY;
    case ReduceCode::kProd:
      return A(1);
  }
  return A(0);
}

// Combines the block's values in shared memory; thread 0 gets the result.
template <typename A>
__device__ __forceinline__ A BlockCombine(ReduceCode code, A acc) {
  __shared__ A partial[kThreads];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      partial[threadIdx.x] = Combine(code, partial[threadIdx.x], partial[threadIdx.x + width]);
    }
    __syncthreads();
  }
  const A result = partial[0];
  __syncthreads();  // partial is reused by the next output of a grid-stride loop
  return result;
}

// `splits` blocks per output (grid-stride over out_size * splits): block (o, k) combines the
// reduced positions k, k + splits, ... in chunks of blockDim.x and writes the partial to
// partial[o * splits + k]; with splits == 1 and partial == nullptr it stores the final value
// (times scale, per req) into out[o] instead.
template <typename T, typename A>
__global__ void ReduceKernel(ReduceCode code, StridedSpace kept, StridedSpace reduced,
                             int64_t out_size, int64_t red_size, int64_t splits, const T* in,
                             A* partial, T* out, A scale, int req) {
  for (int64_t job = blockIdx.x; job < out_size * splits; job += gridDim.x) {
    const int64_t o = job / splits, k = job % splits;
    const int64_t base = Offset(kept, o);
    A acc = Identity<A>(code);
    for (int64_t r = k * blockDim.x + threadIdx.x; r < red_size; r += splits * blockDim.x) {
      acc = Combine(code, acc, static_cast<A>(ToAcc(in[base + Offset(reduced, r)])));
    }
    acc = BlockCombine(code, acc);
    if (threadIdx.x == 0) {
      if (partial != nullptr) {
        partial[job] = acc;
      } else {
        StoreAcc(out + o, req, static_cast<Acc<T>>(acc * scale));
      }
    }
  }
}

// The second pass: out[o] (per req) = scale * combine of partial[o * splits .. + splits).
template <typename T, typename A>
__global__ void CombinePartialsKernel(ReduceCode code, const A* partial, int64_t out_size,
                                      int64_t splits, T* out, A scale, int req) {
  for (int64_t o = blockIdx.x; o < out_size; o += gridDim.x) {
    A acc = Identity<A>(code);
    for (int64_t k = threadIdx.x; k < splits; k += blockDim.x) {
      acc = Combine(code, acc, partial[o * splits + k]);
    }
    acc = BlockCombine(code, acc);
    if (threadIdx.x == 0) StoreAcc(out + o, req, static_cast<Acc<T>>(acc * scale));
  }
}

// How many blocks share one output: enough for ~kReduceBlocks blocks in all when outputs are
// few, none when every output already has a block, and never a block with under
// kMinPerBlock elements to combine.
constexpr int64_t kReduceBlocks = 1024;
constexpr int64_t kMinPerBlock = 4 * kThreads;

int64_t SplitsFor(int64_t out_size, int64_t red_size) {
  if (out_size >= kReduceBlocks || red_size < 2 * kMinPerBlock) return 1;
  const int64_t by_blocks = kReduceBlocks / out_size;
  const int64_t by_work = red_size / kMinPerBlock;
  const int64_t splits = by_blocks < by_work ? by_blocks : by_work;
  return splits < 1 ? 1 : splits;
}

int64_t Elements(const StridedSpace& space) {
  int64_t n = 1;
  for (int d = 0; d < space.ndim; ++d) n *= space.shape[d];
  return n;
}

// ---- fills and casts ----

// The CPU's Convert (ndarray/internal/math_scalar.h): floating to integer saturates and maps
// NaN to 0; everything else is a plain conversion through the arithmetic types.
template <typename To, typename From>
__device__ __forceinline__ To Convert(From v) {
  using FA = Acc<From>;
  using TA = Acc<To>;
  const FA x = static_cast<FA>(ToAcc(v));
  if constexpr (std::is_integral_v<TA> && std::is_floating_point_v<FA>) {
    const double d = static_cast<double>(x);
    if (isnan(d)) return To(0);
    if (d <= static_cast<double>(::cuda::std::numeric_limits<TA>::lowest())) {
      return To(::cuda::std::numeric_limits<TA>::lowest());
    }
    if (d >= static_cast<double>(::cuda::std::numeric_limits<TA>::max())) {
      return To(::cuda::std::numeric_limits<TA>::max());
    }
    return static_cast<To>(static_cast<TA>(x));
  } else {
    return FromAcc<To>(static_cast<TA>(x));
  }
}

template <typename T>
__global__ void FillKernel(T* out, int64_t n, T value) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) out[i] = value;
}

template <typename To, typename From>
__global__ void CastKernel(const From* in, To* out, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) out[i] = Convert<To>(in[i]);
}

// ---- sampling ----

// Output q (counted from the generator's seed position) of gen's stream.
__device__ __forceinline__ uint32_t OutputAt(const engine::PhiloxRandom& gen, uint64_t q) {
  return gen.Block(q / 4).v[q % 4];
}

__device__ __forceinline__ double UniformDoubleAt(const engine::PhiloxRandom& gen, uint64_t q) {
  const uint64_t bits = (static_cast<uint64_t>(OutputAt(gen, q)) << 32) | OutputAt(gen, q + 1);
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// The CPU's Draw (ndarray/random.cc) for element i, whose outputs start at position q.
template <typename T>
__global__ void SampleKernel(SampleCode code, engine::PhiloxRandom gen, uint64_t start, double a,
                             double b, T* out, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    double v;
    if (code == SampleCode::kNormal) {
      const uint64_t q = start + 4 * static_cast<uint64_t>(i);
      const double u1 = 1.0 - UniformDoubleAt(gen, q);
      const double u2 = UniformDoubleAt(gen, q + 2);
      const float g = static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
      v = a + b * static_cast<double>(g);
    } else if constexpr (std::is_same_v<T, double>) {
      v = a + (b - a) * UniformDoubleAt(gen, start + 2 * static_cast<uint64_t>(i));
    } else {
      const uint32_t u = OutputAt(gen, start + static_cast<uint64_t>(i));
      v = a + (b - a) * static_cast<double>(static_cast<float>(u >> 8) * (1.0f / 16777216.0f));
    }
    T t = FromAcc<T>(static_cast<Acc<T>>(v));
    // Rounding to a narrower type can land exactly on `high`; keep the interval half-open.
    if (code == SampleCode::kUniform && static_cast<double>(ToAcc(t)) >= b) {
      t = FromAcc<T>(static_cast<Acc<T>>(a));
    }
    out[i] = t;
  }
}

}  // namespace

cudaError_t LaunchMap(MapCode code, KernelType type, const void* a, const void* b, const void* c,
                      void* out, int64_t n, double s, int req, cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  return ForKernelType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    MapKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
        code, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(c),
        static_cast<T*>(out), n, static_cast<Acc<T>>(s), req);
    return cudaGetLastError();
  });
}

cudaError_t LaunchStridedMap(MapCode code, KernelType type, const StridedSpace& space,
                             const void* a, const void* b, const void* c, void* out, double s,
                             int req, cudaStream_t stream) {
  const int64_t n = Elements(space);
  if (n == 0 || req == 0) return cudaSuccess;
  return ForKernelType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    StridedMapKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
        code, space, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(c),
        static_cast<T*>(out), n, static_cast<Acc<T>>(s), req);
    return cudaGetLastError();
  });
}

cudaError_t LaunchAddTo(KernelType type, const void* in, void* out, int64_t n,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ForKernelType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    AddToKernel<T>
        <<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), n);
    return cudaGetLastError();
  });
}

size_t ReduceScratchBytes(KernelType type, const StridedSpace& kept, const StridedSpace& reduced) {
  const int64_t out_size = Elements(kept);
  const int64_t splits = SplitsFor(out_size, Elements(reduced));
  if (splits == 1) return 0;
  const size_t acc = type == KernelType::kFloat64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(out_size * splits) * acc;
}

cudaError_t LaunchReduce(ReduceCode code, KernelType type, const StridedSpace& kept,
                         const StridedSpace& reduced, const void* in, void* out, double scale,
                         int req, void* scratch, cudaStream_t stream) {
  const int64_t out_size = Elements(kept), red_size = Elements(reduced);
  if (out_size == 0 || req == 0) return cudaSuccess;
  int64_t splits = SplitsFor(out_size, red_size);
  if (scratch == nullptr) splits = 1;
  return ForKernelType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = Acc<T>;
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    const int64_t jobs = out_size * splits;
    const int blocks = static_cast<int>(jobs < 65535 ? jobs : 65535);
    A* partial = splits > 1 ? static_cast<A*>(scratch) : nullptr;
    ReduceKernel<T, A><<<blocks, kThreads, 0, stream>>>(code, kept, reduced, out_size, red_size,
                                                        splits, src, partial, dst,
                                                        static_cast<A>(scale), req);
    if (splits > 1) {
      const int out_blocks = static_cast<int>(out_size < 65535 ? out_size : 65535);
      CombinePartialsKernel<T, A><<<out_blocks, kThreads, 0, stream>>>(
          code, partial, out_size, splits, dst, static_cast<A>(scale), req);
    }
    return cudaGetLastError();
  });
}

// The CPU's Convert of a double (math_scalar.h): integers saturate and NaN gives 0.
template <typename T>
T ConvertFillValue(double value) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return FromAcc<T>(static_cast<float>(value));
  } else if constexpr (std::is_integral_v<T>) {
    if (std::isnan(value)) return T(0);
    if (value <= static_cast<double>(std::numeric_limits<T>::lowest())) {
      return std::numeric_limits<T>::lowest();
    }
    if (value >= static_cast<double>(std::numeric_limits<T>::max())) {
      return std::numeric_limits<T>::max();
    }
    return static_cast<T>(value);
  } else {
    return static_cast<T>(value);
  }
}

cudaError_t LaunchFill(ElemType type, void* out, int64_t n, double value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TESSERA_ELEM_TYPE_SWITCH(type, T, {
    FillKernel<T>
        <<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, ConvertFillValue<T>(value));
  });
  return cudaGetLastError();
}

cudaError_t LaunchCast(ElemType from, const void* in, ElemType to, void* out, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  TESSERA_ELEM_TYPE_SWITCH(from, From, {
    TESSERA_ELEM_TYPE_SWITCH(to, To, {
      CastKernel<To, From><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const From*>(in),
                                                               static_cast<To*>(out), n);
    });
  });
  return cudaGetLastError();
}

int64_t SampleOutputs(SampleCode code, KernelType type, int64_t n) {
  if (code == SampleCode::kNormal) return 4 * n;
  return type == KernelType::kFloat64 ? 2 * n : n;
}

cudaError_t LaunchSample(SampleCode code, KernelType type, const engine::PhiloxRandom& gen,
                         double a, double b, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ForKernelType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    SampleKernel<T><<<Blocks(n), kThreads, 0, stream>>>(code, gen, gen.position(), a, b,
                                                        static_cast<T*>(out), n);
    return cudaGetLastError();
  });
}

}  // namespace tessera::cuda

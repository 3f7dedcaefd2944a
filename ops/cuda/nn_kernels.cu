// The CUDA kernels behind ops/cuda/nn_kernels.h: SoftmaxOutput's gradient, softsign, own
// pooling and Deconvolution's crop / pad copies. Each mirrors a CPU loop of ops/nn in the same
// arithmetic (and, where the CPU accumulates, the same order), so that results agree to the
// last bit where no library function (exp, pow, cbrt) is involved.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "ndarray/cuda/launch_util.cuh"
#include "ops/cuda/nn_kernels.h"

namespace tessera::ops::cuda {
namespace {

using ::tessera::cuda::Blocks;
using ::tessera::cuda::GridStart;
using ::tessera::cuda::GridStride;
using ::tessera::cuda::kThreads;
using ::tessera::cuda::Store;

// ---- SoftmaxOutput ----

// One block: the count is a handful of loads per thread for any realistic label count, and a
// single block needs neither atomics nor a zeroed accumulator.
__global__ void CountNotEqualKernel(const float* labels, int64_t n, float value,
                                    unsigned long long* count) {
  __shared__ unsigned long long part[kThreads];
  unsigned long long c = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += labels[i] != value;
  part[threadIdx.x] = c;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) part[threadIdx.x] += part[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = part[0];
}

__global__ void SoftmaxOutputGradKernel(SoftmaxOutputGradArgs a, const float* prob,
                                        const float* labels, float* grad, int req) {
  float scale = a.scale;
  if (a.valid_count != nullptr) {
    const unsigned long long valid = *a.valid_count;
    // As the CPU: grad_scale / normalizer in double, then rounded to float.
    scale = static_cast<float>(a.grad_scale / static_cast<double>(valid > 0 ? valid : 1));
  }
  const int64_t n = a.outer * a.classes * a.inner;
  for (int64_t idx = GridStart(); idx < n; idx += GridStride()) {
    const int64_t i = idx % a.inner;
    const int64_t oc = idx / a.inner;
    const int64_t c = oc % a.classes;
    const int64_t o = oc / a.classes;
    const float l = labels[o * a.inner + i];
    float g;
    if (a.use_ignore && l == a.ignore_label) {
      g = 0.0f;
    } else if (!(l > -0.5f && static_cast<double>(l) < static_cast<double>(a.classes) - 0.5)) {
      // std::lround(l) outside [0, classes), NaN included: the CPU's error.
      g = NAN;
    } else {
      const int64_t k = llroundf(l);
      g = (prob[idx] - (c == k ? a.on_target : a.off_target)) * scale;
    }
    Store(grad + idx, req, g);
  }
}

// ---- softsign ----

__global__ void SoftsignKernel(const float* x, float* y, int64_t n, int req) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float v = x[i];
    Store(y + i, req, v / (1.0f + fabsf(v)));
  }
}

__global__ void SoftsignGradKernel(const float* dy, const float* y, float* dx, int64_t n, int req) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float d = 1.0f - fabsf(y[i]);
    // (dy * d) * d, the CPU's order.
    Store(dx + i, req, dy[i] * d * d);
  }
}

// ---- Pooling ----

// x^p and its real p-th root, as ops/nn/pooling.cc's PowP / RootP.
__device__ __forceinline__ double PowP(double x, int p) {
  switch (p) {
    case 1:
      return x;
    case 2:
      return x * x;
    case 3:
      return x * x * x;
    default:
      return pow(x, static_cast<double>(p));
  }
}

__device__ __forceinline__ double RootP(double sum, int p) {
  switch (p) {
    case 1:
      return sum;
    case 2:
      return sqrt(sum);
    case 3:
      return cbrt(sum);
    default:
      return copysign(pow(fabs(sum), 1.0 / p), sum);
  }
}

// The window of output (oh, ow): its start (may be negative) and the covered input range
// [h0, h1) x [w0, w1) (empty when the window lies beyond the input).
struct Window {
  int64_t hs, ws, h0, h1, w0, w1;
};

__device__ __forceinline__ Window WindowOf(const PoolGeometry& g, int64_t oh, int64_t ow) {
  Window w;
  w.hs = oh * g.stride_h - g.pad_h;
  w.ws = ow * g.stride_w - g.pad_w;
  w.h0 = w.hs > 0 ? w.hs : 0;
  w.w0 = w.ws > 0 ? w.ws : 0;
  w.h1 = w.hs + g.kernel_h < g.in_h ? w.hs + g.kernel_h : g.in_h;
  w.w1 = w.ws + g.kernel_w < g.in_w ? w.ws + g.kernel_w : g.in_w;
  return w;
}

// The divisor of avg with count_include_pad: the window clipped to the padded input, as the
// CPU computes it (not clamped at 0: a window past the padded input gives the CPU's 0 / 0 =
// NaN or -0 there too).
__device__ __forceinline__ float IncludePadDivisor(const PoolGeometry& g, const Window& w) {
  const int64_t he = w.hs + g.kernel_h < g.in_h + g.pad_h ? w.hs + g.kernel_h : g.in_h + g.pad_h;
  const int64_t we = w.ws + g.kernel_w < g.in_w + g.pad_w ? w.ws + g.kernel_w : g.in_w + g.pad_w;
  return static_cast<float>((he - w.hs) * (we - w.ws));
}

__device__ __forceinline__ float ExcludePadDivisor(const Window& w) {
  const int64_t rows = w.h1 > w.h0 ? w.h1 - w.h0 : 0;
  const int64_t cols = w.w1 > w.w0 ? w.w1 - w.w0 : 0;
  return static_cast<float>(rows * cols);
}

__global__ void PoolForwardKernel(PoolKind kind, int p, PoolGeometry g, const float* x, float* y,
                                  int req) {
  const int64_t n = g.planes * g.out_h * g.out_w;
  for (int64_t idx = GridStart(); idx < n; idx += GridStride()) {
    const int64_t ow = idx % g.out_w;
    const int64_t t = idx / g.out_w;
    const int64_t oh = t % g.out_h;
    const int64_t plane = t / g.out_h;
    const Window w = WindowOf(g, oh, ow);
    const float* xp = x + plane * g.in_h * g.in_w;
    if (kind == PoolKind::kLp) {
      double sum = 0;
      for (int64_t i = w.h0; i < w.h1; ++i) {
        for (int64_t j = w.w0; j < w.w1; ++j) sum += PowP(xp[i * g.in_w + j], p);
      }
      const double r = RootP(sum, p);
      // The CPU's Assign of a double into float: the sum in double, then rounded.
      y[idx] = static_cast<float>(req == 3 ? static_cast<double>(y[idx]) + r : r);
      continue;
    }
    if (kind == PoolKind::kMax) {
      float m = -FLT_MAX;
      for (int64_t i = w.h0; i < w.h1; ++i) {
        for (int64_t j = w.w0; j < w.w1; ++j) {
          const float v = xp[i * g.in_w + j];
          if (v > m) m = v;
        }
      }
      Store(y + idx, req, m);
      continue;
    }
    float sum = 0;
    for (int64_t i = w.h0; i < w.h1; ++i) {
      for (int64_t j = w.w0; j < w.w1; ++j) sum += xp[i * g.in_w + j];
    }
    float v = sum;
    if (kind == PoolKind::kAvgIncludePad) v = sum / IncludePadDivisor(g, w);
    if (kind == PoolKind::kAvgExcludePad) v = sum / ExcludePadDivisor(w);
    Store(y + idx, req, v);
  }
}

// Whether (ih, iw) holds the first largest element of window w (scan order rows, then
// columns; strict > from the lowest float, as oneDNN's reference max pooling).
__device__ __forceinline__ bool IsArgMax(const PoolGeometry& g, const float* xp, const Window& w,
                                         int64_t ih, int64_t iw) {
  float m = -FLT_MAX;
  int64_t at = -1;
  for (int64_t i = w.h0; i < w.h1; ++i) {
    for (int64_t j = w.w0; j < w.w1; ++j) {
      const float v = xp[i * g.in_w + j];
      if (v > m) {
        m = v;
        at = i * g.in_w + j;
      }
    }
  }
  return at == ih * g.in_w + iw;
}

__global__ void PoolBackwardKernel(PoolKind kind, int p, PoolGeometry g, const float* dy,
                                   const float* x, const float* y, float* dx, int req) {
  const int64_t n = g.planes * g.in_h * g.in_w;
  for (int64_t idx = GridStart(); idx < n; idx += GridStride()) {
    const int64_t iw = idx % g.in_w;
    const int64_t t = idx / g.in_w;
    const int64_t ih = t % g.in_h;
    const int64_t plane = t / g.in_h;
    // The windows covering (ih, iw): o * stride - pad <= i < o * stride - pad + kernel.
    const int64_t rh = ih + g.pad_h - g.kernel_h, rw = iw + g.pad_w - g.kernel_w;
    const int64_t oh_lo = rh < 0 ? 0 : rh / g.stride_h + 1;
    const int64_t ow_lo = rw < 0 ? 0 : rw / g.stride_w + 1;
    const int64_t oh_hi =
        (ih + g.pad_h) / g.stride_h < g.out_h - 1 ? (ih + g.pad_h) / g.stride_h : g.out_h - 1;
    const int64_t ow_hi =
        (iw + g.pad_w) / g.stride_w < g.out_w - 1 ? (iw + g.pad_w) / g.stride_w : g.out_w - 1;
    const float* xp = x + plane * g.in_h * g.in_w;
    // Accumulated in float in the CPU's order (output rows, then columns), starting from
    // what kAddTo adds to, as the CPU's in-place accumulation does.
    float acc = req == 3 ? dx[idx] : 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const Window w = WindowOf(g, oh, ow);
        const int64_t o = (plane * g.out_h + oh) * g.out_w + ow;
        switch (kind) {
          case PoolKind::kMax:
            if (IsArgMax(g, xp, w, ih, iw)) acc += dy[o];
            break;
          case PoolKind::kSum:
            acc += dy[o];
            break;
          case PoolKind::kAvgIncludePad:
            acc += dy[o] / IncludePadDivisor(g, w);
            break;
          case PoolKind::kAvgExcludePad:
            acc += dy[o] / ExcludePadDivisor(w);
            break;
          case PoolKind::kLp: {
            // MXNet's lp_grad (x / y)^(p-1), 0 where y == 0, in double as the CPU.
            const double yv = y[o];
            const double d = p == 1 ? 1.0 : yv == 0 ? 0.0 : PowP(xp[ih * g.in_w + iw] / yv, p - 1);
            acc += static_cast<float>(static_cast<double>(dy[o]) * d);
            break;
          }
        }
      }
    }
    dx[idx] = acc;
  }
}

// ---- Deconvolution ----

__global__ void CropPlanesKernel(const float* big, float* small, int64_t planes, int64_t small_h,
                                 int64_t small_w, int64_t off_h, int64_t off_w, int req) {
  const int64_t n = planes * small_h * small_w;
  const int64_t big_h = small_h + off_h, big_w = small_w + off_w;
  for (int64_t idx = GridStart(); idx < n; idx += GridStride()) {
    const int64_t c = idx % small_w;
    const int64_t t = idx / small_w;
    const int64_t r = t % small_h;
    const int64_t plane = t / small_h;
    Store(small + idx, req, big[(plane * big_h + r + off_h) * big_w + c + off_w]);
  }
}

__global__ void ZeroPadPlanesKernel(const float* small, float* big, int64_t planes, int64_t small_h,
                                    int64_t small_w, int64_t off_h, int64_t off_w) {
  const int64_t big_h = small_h + off_h, big_w = small_w + off_w;
  const int64_t n = planes * big_h * big_w;
  for (int64_t idx = GridStart(); idx < n; idx += GridStride()) {
    const int64_t c = idx % big_w;
    const int64_t t = idx / big_w;
    const int64_t r = t % big_h;
    const int64_t plane = t / big_h;
    big[idx] = r >= off_h && c >= off_w ? small[(plane * small_h + r - off_h) * small_w + c - off_w]
                                        : 0.0f;
  }
}

}  // namespace

cudaError_t LaunchCountNotEqual(const float* labels, int64_t n, float value,
                                unsigned long long* count, cudaStream_t stream) {
  CountNotEqualKernel<<<1, kThreads, 0, stream>>>(labels, n, value, count);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxOutputGrad(const SoftmaxOutputGradArgs& args, const float* prob,
                                    const float* labels, float* grad, int req,
                                    cudaStream_t stream) {
  const int64_t n = args.outer * args.classes * args.inner;
  if (n == 0 || req == 0) return cudaSuccess;
  SoftmaxOutputGradKernel<<<Blocks(n), kThreads, 0, stream>>>(args, prob, labels, grad, req);
  return cudaGetLastError();
}

cudaError_t LaunchSoftsign(const float* x, float* y, int64_t n, int req, cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  SoftsignKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n, req);
  return cudaGetLastError();
}

cudaError_t LaunchSoftsignGrad(const float* dy, const float* y, float* dx, int64_t n, int req,
                               cudaStream_t stream) {
  if (n == 0 || req == 0) return cudaSuccess;
  SoftsignGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, y, dx, n, req);
  return cudaGetLastError();
}

cudaError_t LaunchPoolForward(PoolKind kind, int p, const PoolGeometry& g, const float* x, float* y,
                              int req, cudaStream_t stream) {
  const int64_t n = g.planes * g.out_h * g.out_w;
  if (n == 0 || req == 0) return cudaSuccess;
  PoolForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(kind, p, g, x, y, req);
  return cudaGetLastError();
}

cudaError_t LaunchPoolBackward(PoolKind kind, int p, const PoolGeometry& g, const float* dy,
                               const float* x, const float* y, float* dx, int req,
                               cudaStream_t stream) {
  const int64_t n = g.planes * g.in_h * g.in_w;
  if (n == 0 || req == 0) return cudaSuccess;
  PoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(kind, p, g, dy, x, y, dx, req);
  return cudaGetLastError();
}

cudaError_t LaunchCropPlanes(const float* big, float* small, int64_t planes, int64_t small_h,
                             int64_t small_w, int64_t off_h, int64_t off_w, int req,
                             cudaStream_t stream) {
  const int64_t n = planes * small_h * small_w;
  if (n == 0 || req == 0) return cudaSuccess;
  CropPlanesKernel<<<Blocks(n), kThreads, 0, stream>>>(big, small, planes, small_h, small_w, off_h,
                                                       off_w, req);
  return cudaGetLastError();
}

cudaError_t LaunchZeroPadPlanes(const float* small, float* big, int64_t planes, int64_t small_h,
                                int64_t small_w, int64_t off_h, int64_t off_w,
                                cudaStream_t stream) {
  const int64_t n = planes * (small_h + off_h) * (small_w + off_w);
  if (n == 0) return cudaSuccess;
  ZeroPadPlanesKernel<<<Blocks(n), kThreads, 0, stream>>>(small, big, planes, small_h, small_w,
                                                          off_h, off_w);
  return cudaGetLastError();
}

}  // namespace tessera::ops::cuda

// The kernels behind update_kernels_gpu.h: one grid-stride kernel per update, each a line
// by line transcription of its CPU loop in update_kernels.cc (read them side by side). The
// clip flag is a template parameter chosen on the host exactly as the CPU loops choose it
// (bound >= 0; a NaN bound clips nothing), and each element is loaded once, which gives the
// CPU's values even when grad is the weight itself, since every CPU loop reads grad and
// weight before writing either.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kvstore/internal/update_kernels_gpu.h"
#include "ndarray/cuda/launch_util.cuh"

namespace tessera::kvstore::internal {
namespace {

using ::tessera::cuda::Blocks;
using ::tessera::cuda::GridStart;
using ::tessera::cuda::GridStride;
using ::tessera::cuda::kThreads;

// Every operation rounded on its own: nvcc would contract a * b + c into one FMA, which
// rounds once and so drifts from the CPU in the last bit, step after step. The _rn
// intrinsics are never contracted, and __fdiv_rn / __fsqrt_rn are IEEE whatever the flags.
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float Sqrt(float a) { return __fsqrt_rn(a); }

// mshadow_op::clip, as the CPU's: NaN passes through (both comparisons are false).
__device__ __forceinline__ float Clip(float x, float bound) {
  if (x > bound) return bound;
  if (x < -bound) return -bound;
  return x;
}

// Without clipping the CPU multiplies lr * rescale_grad first; with it, lr * clip(...).
template <bool kClip>
__global__ void SgdKernel(int64_t n, SgdHyper h, const float* grad, float* weight) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float g = grad[i];
    const float decayed = Mul(Sub(1.f, Mul(h.lr, h.wd)), weight[i]);
    if constexpr (kClip) {
      weight[i] = Sub(decayed, Mul(h.lr, Clip(Mul(h.rescale_grad, g), h.clip_gradient)));
    } else {
      weight[i] = Sub(decayed, Mul(Mul(h.lr, h.rescale_grad), g));
    }
  }
}

template <bool kClip>
__global__ void SgdMomKernel(int64_t n, SgdHyper h, const float* grad, float* weight, float* mom) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float g = grad[i];
    const float w = weight[i];
    const float kept = Sub(Mul(h.momentum, mom[i]), Mul(Mul(h.lr, h.wd), w));
    float m;
    if constexpr (kClip) {
      m = Sub(kept, Mul(h.lr, Clip(Mul(h.rescale_grad, g), h.clip_gradient)));
    } else {
      m = Sub(kept, Mul(Mul(h.lr, h.rescale_grad), g));
    }
    mom[i] = m;
    weight[i] = Add(w, m);
  }
}

template <bool kClip>
__global__ void AdamKernel(int64_t n, AdamHyper h, const float* grad, float* weight, float* mean,
                           float* var) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float w = weight[i];
    float g = Add(Mul(grad[i], h.rescale_grad), Mul(w, h.wd));
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float m = Add(Mul(h.beta1, mean[i]), Mul(Sub(1.f, h.beta1), g));
    const float v = Add(Mul(h.beta2, var[i]), Mul(Mul(Sub(1.f, h.beta2), g), g));
    mean[i] = m;
    var[i] = v;
    weight[i] = Sub(w, Div(Mul(h.lr, m), Add(Sqrt(v), h.epsilon)));
  }
}

// Note (1 - gamma1) * (g * g) here but ((1 - gamma1) * g) * g in the centered form, as on
// the CPU (and in MXNet).
template <bool kClip>
__global__ void RmsPropKernel(int64_t n, RmsPropHyper h, const float* grad, float* weight,
                              float* state_n) {
  const bool clip_w = h.clip_weights >= 0.0f;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float w = weight[i];
    float g = Add(Mul(h.rescale_grad, grad[i]), Mul(h.wd, w));
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float sn = Add(Mul(Sub(1.f, h.gamma1), Mul(g, g)), Mul(h.gamma1, state_n[i]));
    state_n[i] = sn;
    const float updated = Sub(w, Mul(h.lr, Div(g, Sqrt(Add(sn, h.epsilon)))));
    weight[i] = clip_w ? Clip(updated, h.clip_weights) : updated;
  }
}

template <bool kClip>
__global__ void RmsPropCenteredKernel(int64_t n, RmsPropHyper h, const float* grad, float* weight,
                                      float* state_n, float* state_g, float* delta) {
  const bool clip_w = h.clip_weights >= 0.0f;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float w = weight[i];
    float g = Add(Mul(h.rescale_grad, grad[i]), Mul(h.wd, w));
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float sn = Add(Mul(Mul(Sub(1.f, h.gamma1), g), g), Mul(h.gamma1, state_n[i]));
    const float sg = Add(Mul(Sub(1.f, h.gamma1), g), Mul(h.gamma1, state_g[i]));
    const float d =
        Sub(Mul(h.gamma2, delta[i]), Div(Mul(h.lr, g), Sqrt(Add(Sub(sn, Mul(sg, sg)), h.epsilon))));
    state_n[i] = sn;
    state_g[i] = sg;
    delta[i] = d;
    const float updated = Add(w, d);
    weight[i] = clip_w ? Clip(updated, h.clip_weights) : updated;
  }
}

// The weight decay is not clipped (MXNet's Python AdaGrad adds it after the clip).
template <bool kClip>
__global__ void AdaGradKernel(int64_t n, AdaGradHyper h, const float* grad, float* weight,
                              float* history) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    float g = Mul(grad[i], h.rescale_grad);
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float hist = Add(history[i], Mul(g, g));
    history[i] = hist;
    const float div = Div(g, Sqrt(Add(hist, h.eps)));
    const float w = weight[i];
    weight[i] = Add(w, Mul(Add(div, Mul(w, h.wd)), -h.lr));
  }
}

// Launches `clipping` or `plain` over n elements on `stream`. The arguments are converted
// to the kernel's parameter types (type_identity keeps them out of deduction).
template <typename... Params>
cudaError_t Launch(int64_t n, bool clip, cudaStream_t stream, void (*clipping)(int64_t, Params...),
                   void (*plain)(int64_t, Params...), std::type_identity_t<Params>... args) {
  if (n <= 0) return cudaSuccess;
  void (*kernel)(int64_t, Params...) = clip ? clipping : plain;
  kernel<<<Blocks(n), kThreads, 0, stream>>>(n, args...);
  return cudaGetLastError();
}

}  // namespace

cudaError_t SgdUpdateGpu(int64_t n, const SgdHyper& h, const float* grad, float* weight,
                         cudaStream_t stream) {
  return Launch(n, h.clip_gradient >= 0.0f, stream, &SgdKernel<true>, &SgdKernel<false>, h, grad,
                weight);
}

cudaError_t SgdMomUpdateGpu(int64_t n, const SgdHyper& h, const float* grad, float* weight,
                            float* mom, cudaStream_t stream) {
  return Launch(n, h.clip_gradient >= 0.0f, stream, &SgdMomKernel<true>, &SgdMomKernel<false>, h,
                grad, weight, mom);
}

cudaError_t AdamUpdateGpu(int64_t n, const AdamHyper& h, const float* grad, float* weight,
                          float* mean, float* var, cudaStream_t stream) {
  return Launch(n, h.clip_gradient >= 0.0f, stream, &AdamKernel<true>, &AdamKernel<false>, h, grad,
                weight, mean, var);
}

cudaError_t RmsPropUpdateGpu(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                             float* state_n, cudaStream_t stream) {
  return Launch(n, h.clip_gradient >= 0.0f, stream, &RmsPropKernel<true>, &RmsPropKernel<false>, h,
                grad, weight, state_n);
}

cudaError_t RmsPropCenteredUpdateGpu(int64_t n, const RmsPropHyper& h, const float* grad,
                                     float* weight, float* state_n, float* state_g, float* delta,
                                     cudaStream_t stream) {
  return Launch(n, h.clip_gradient >= 0.0f, stream, &RmsPropCenteredKernel<true>,
                &RmsPropCenteredKernel<false>, h, grad, weight, state_n, state_g, delta);
}

cudaError_t AdaGradUpdateGpu(int64_t n, const AdaGradHyper& h, const float* grad, float* weight,
                             float* history, cudaStream_t stream) {
  return Launch(n, h.clip_gradient >= 0.0f, stream, &AdaGradKernel<true>, &AdaGradKernel<false>, h,
                grad, weight, history);
}

}  // namespace tessera::kvstore::internal

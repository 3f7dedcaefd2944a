// The kernels behind update_kernels_gpu.h: each update's element, a line by line
// transcription of its CPU loop in update_kernels.cc (read them side by side), run by a
// grid-stride kernel over one parameter or by a fused kernel over many. The clip flag is a
// template parameter chosen on the host exactly as the CPU loops choose it (bound >= 0; a NaN
// bound clips nothing), and each element is loaded once, which gives the CPU's values even
// when grad is the weight itself, since every CPU loop reads grad and weight before writing
// either.
#include <cuda_runtime.h>

#include <cstdint>

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

// One element of each update, shared by the one-parameter kernels and the fused ones.
// Apply<kClip>(h, i, grad, weight, s) updates element i; s holds the state pointers in the
// optimizer's order. Without clipping the CPU multiplies lr * rescale_grad first; with it,
// lr * clip(...).
struct SgdElement {
  using Hyper = SgdHyper;
  template <bool kClip>
  __device__ static void Apply(const SgdHyper& h, int64_t i, const float* grad, float* weight,
                               float* const*) {
    const float g = grad[i];
    const float decayed = Mul(Sub(1.f, Mul(h.lr, h.wd)), weight[i]);
    if constexpr (kClip) {
      weight[i] = Sub(decayed, Mul(h.lr, Clip(Mul(h.rescale_grad, g), h.clip_gradient)));
    } else {
      weight[i] = Sub(decayed, Mul(Mul(h.lr, h.rescale_grad), g));
    }
  }
};

struct SgdMomElement {
  using Hyper = SgdHyper;
  template <bool kClip>
  __device__ static void Apply(const SgdHyper& h, int64_t i, const float* grad, float* weight,
                               float* const* s) {
    float* mom = s[0];
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
};

struct AdamElement {
  using Hyper = AdamHyper;
  template <bool kClip>
  __device__ static void Apply(const AdamHyper& h, int64_t i, const float* grad, float* weight,
                               float* const* s) {
    float* mean = s[0];
    float* var = s[1];
    const float w = weight[i];
    float g = Add(Mul(grad[i], h.rescale_grad), Mul(w, h.wd));
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float m = Add(Mul(h.beta1, mean[i]), Mul(Sub(1.f, h.beta1), g));
    const float v = Add(Mul(h.beta2, var[i]), Mul(Mul(Sub(1.f, h.beta2), g), g));
    mean[i] = m;
    var[i] = v;
    weight[i] = Sub(w, Div(Mul(h.lr, m), Add(Sqrt(v), h.epsilon)));
  }
};

// Note (1 - gamma1) * (g * g) here but ((1 - gamma1) * g) * g in the centered form, as on
// the CPU (and in MXNet).
struct RmsPropElement {
  using Hyper = RmsPropHyper;
  template <bool kClip>
  __device__ static void Apply(const RmsPropHyper& h, int64_t i, const float* grad,
                               float* weight, float* const* s) {
    float* state_n = s[0];
    const float w = weight[i];
    float g = Add(Mul(h.rescale_grad, grad[i]), Mul(h.wd, w));
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float sn = Add(Mul(Sub(1.f, h.gamma1), Mul(g, g)), Mul(h.gamma1, state_n[i]));
    state_n[i] = sn;
    const float updated = Sub(w, Mul(h.lr, Div(g, Sqrt(Add(sn, h.epsilon)))));
    weight[i] = h.clip_weights >= 0.0f ? Clip(updated, h.clip_weights) : updated;
  }
};

struct RmsPropCenteredElement {
  using Hyper = RmsPropHyper;
  template <bool kClip>
  __device__ static void Apply(const RmsPropHyper& h, int64_t i, const float* grad,
                               float* weight, float* const* s) {
    float* state_n = s[0];
    float* state_g = s[1];
    float* delta = s[2];
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
    weight[i] = h.clip_weights >= 0.0f ? Clip(updated, h.clip_weights) : updated;
  }
};

// The weight decay is not clipped (MXNet's Python AdaGrad adds it after the clip).
struct AdaGradElement {
  using Hyper = AdaGradHyper;
  template <bool kClip>
  __device__ static void Apply(const AdaGradHyper& h, int64_t i, const float* grad,
                               float* weight, float* const* s) {
    float* history = s[0];
    float g = Mul(grad[i], h.rescale_grad);
    if constexpr (kClip) g = Clip(g, h.clip_gradient);
    const float hist = Add(history[i], Mul(g, g));
    history[i] = hist;
    const float div = Div(g, Sqrt(Add(hist, h.eps)));
    const float w = weight[i];
    weight[i] = Add(w, Mul(Add(div, Mul(w, h.wd)), -h.lr));
  }
};

struct States {
  float* s[kMaxFusedStates];
};

// One parameter: a grid-stride loop.
template <typename Element, bool kClip>
__global__ void UpdateKernel(int64_t n, typename Element::Hyper h, const float* grad,
                             float* weight, States states) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    Element::template Apply<kClip>(h, i, grad, weight, states.s);
  }
}

template <typename Element>
cudaError_t LaunchOne(int64_t n, const typename Element::Hyper& h, const float* grad,
                      float* weight, States states, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (h.clip_gradient >= 0.0f) {
    UpdateKernel<Element, true><<<Blocks(n), kThreads, 0, stream>>>(n, h, grad, weight, states);
  } else {
    UpdateKernel<Element, false><<<Blocks(n), kThreads, 0, stream>>>(n, h, grad, weight, states);
  }
  return cudaGetLastError();
}

// Every parameter of a fused update: block b updates chunks b, b + gridDim.x, ... with the
// hyperparameters of the step that comes next. Every block reads the same counter, which only
// FusedCountKernel (the next launch on the stream) changes.
template <typename Element, bool kClip>
__global__ void FusedKernel(FusedTable table) {
  const int64_t row = table.counters->steps_done + 1 - table.window->first_step;
  if (row < 0 || row >= table.window->rows) return;
  const auto* hypers =
      static_cast<const typename Element::Hyper*>(table.hypers) + row * table.window->groups;
  for (int32_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const FusedChunk chunk = table.chunks[c];
    const FusedTensor& t = table.tensors[chunk.tensor];
    const typename Element::Hyper h = hypers[t.group];
    const int64_t end = min(chunk.begin + kFusedChunkElements, t.n);
    for (int64_t i = chunk.begin + threadIdx.x; i < end; i += blockDim.x) {
      Element::template Apply<kClip>(h, i, t.grad, t.weight, t.state);
    }
  }
}

// Marks the lowest tensor whose gradient holds a NaN or an infinity, until a step is recorded
// (FusedCountKernel records it).
__global__ void FusedCheckKernel(FusedTable table) {
  if (table.counters->nonfinite_step != 0) return;
  for (int32_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const FusedChunk chunk = table.chunks[c];
    const FusedTensor& t = table.tensors[chunk.tensor];
    const int64_t end = min(chunk.begin + kFusedChunkElements, t.n);
    bool bad = false;
    for (int64_t i = chunk.begin + threadIdx.x; i < end; i += blockDim.x) {
      bad |= !isfinite(t.grad[i]);
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) {
      atomicMin(&table.counters->nonfinite_tensor, chunk.tensor);
    }
  }
}

__global__ void FusedCountKernel(FusedTable table) {
  FusedCounters* c = table.counters;
  if (c->nonfinite_step == 0 && c->nonfinite_tensor != kNoTensor) {
    c->nonfinite_step = c->steps_done + 1;
  }
  const int64_t row = c->steps_done + 1 - table.window->first_step;
  if (row < 0 || row >= table.window->rows) {
    ++c->missed;
  } else {
    ++c->steps_done;
  }
}

constexpr int kMaxFusedBlocks = 1 << 16;

template <typename Element>
cudaError_t LaunchFused(const FusedTable& table, bool clip, bool check_finite,
                        cudaStream_t stream) {
  if (table.num_chunks > 0) {
    const int blocks = table.num_chunks < kMaxFusedBlocks ? table.num_chunks : kMaxFusedBlocks;
    if (check_finite) {
      FusedCheckKernel<<<blocks, kThreads, 0, stream>>>(table);
      if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
    }
    if (clip) {
      FusedKernel<Element, true><<<blocks, kThreads, 0, stream>>>(table);
    } else {
      FusedKernel<Element, false><<<blocks, kThreads, 0, stream>>>(table);
    }
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  FusedCountKernel<<<1, 1, 0, stream>>>(table);
  return cudaGetLastError();
}

}  // namespace

cudaError_t SgdUpdateGpu(int64_t n, const SgdHyper& h, const float* grad, float* weight,
                         cudaStream_t stream) {
  return LaunchOne<SgdElement>(n, h, grad, weight, States{}, stream);
}

cudaError_t SgdMomUpdateGpu(int64_t n, const SgdHyper& h, const float* grad, float* weight,
                            float* mom, cudaStream_t stream) {
  return LaunchOne<SgdMomElement>(n, h, grad, weight, States{{mom}}, stream);
}

cudaError_t AdamUpdateGpu(int64_t n, const AdamHyper& h, const float* grad, float* weight,
                          float* mean, float* var, cudaStream_t stream) {
  return LaunchOne<AdamElement>(n, h, grad, weight, States{{mean, var}}, stream);
}

cudaError_t RmsPropUpdateGpu(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                             float* state_n, cudaStream_t stream) {
  return LaunchOne<RmsPropElement>(n, h, grad, weight, States{{state_n}}, stream);
}

cudaError_t RmsPropCenteredUpdateGpu(int64_t n, const RmsPropHyper& h, const float* grad,
                                     float* weight, float* state_n, float* state_g, float* delta,
                                     cudaStream_t stream) {
  return LaunchOne<RmsPropCenteredElement>(n, h, grad, weight, States{{state_n, state_g, delta}},
                                           stream);
}

cudaError_t AdaGradUpdateGpu(int64_t n, const AdaGradHyper& h, const float* grad, float* weight,
                             float* history, cudaStream_t stream) {
  return LaunchOne<AdaGradElement>(n, h, grad, weight, States{{history}}, stream);
}

cudaError_t FusedUpdateGpu(FusedKind kind, const FusedTable& table, bool clip, bool check_finite,
                           cudaStream_t stream) {
  switch (kind) {
    case FusedKind::kSgd: return LaunchFused<SgdElement>(table, clip, check_finite, stream);
    case FusedKind::kSgdMom: return LaunchFused<SgdMomElement>(table, clip, check_finite, stream);
    case FusedKind::kAdam: return LaunchFused<AdamElement>(table, clip, check_finite, stream);
    case FusedKind::kRmsProp: return LaunchFused<RmsPropElement>(table, clip, check_finite, stream);
    case FusedKind::kRmsPropCentered:
      return LaunchFused<RmsPropCenteredElement>(table, clip, check_finite, stream);
    case FusedKind::kAdaGrad: return LaunchFused<AdaGradElement>(table, clip, check_finite, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::kvstore::internal

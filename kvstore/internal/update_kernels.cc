#include "kvstore/internal/update_kernels.h"

#include <cmath>
#include <type_traits>

namespace tessera::kvstore::internal {
namespace {

// mshadow_op::clip: NaN passes through (both comparisons are false).
inline float Clip(float x, float bound) {
  if (x > bound) return bound;
  if (x < -bound) return -bound;
  return x;
}

// Runs body(i, clip) with `clip` a compile-time flag, so each loop has no branch on it and
// vectorizes.
template <typename Body>
void ForEach(int64_t n, bool clip, Body body) {
  if (clip) {
    for (int64_t i = 0; i < n; ++i) body(i, std::true_type{});
  } else {
    for (int64_t i = 0; i < n; ++i) body(i, std::false_type{});
  }
}

}  // namespace

void AddTo(int64_t n, const float* in, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

void SgdUpdate(int64_t n, const SgdHyper& h, const float* grad, float* weight) {
  ForEach(n, h.clip_gradient >= 0.0f, [&](int64_t i, auto clip) {
    if constexpr (decltype(clip)::value) {
      weight[i] =
          (1.f - h.lr * h.wd) * weight[i] - h.lr * Clip(h.rescale_grad * grad[i], h.clip_gradient);
    } else {
      weight[i] = (1.f - h.lr * h.wd) * weight[i] - (h.lr * h.rescale_grad) * grad[i];
    }
  });
}

void SgdMomUpdate(int64_t n, const SgdHyper& h, const float* grad, float* weight, float* mom) {
  ForEach(n, h.clip_gradient >= 0.0f, [&](int64_t i, auto clip) {
    if constexpr (decltype(clip)::value) {
      mom[i] = h.momentum * mom[i] - h.lr * h.wd * weight[i] -
               h.lr * Clip(h.rescale_grad * grad[i], h.clip_gradient);
    } else {
      mom[i] = h.momentum * mom[i] - h.lr * h.wd * weight[i] - h.lr * h.rescale_grad * grad[i];
    }
    weight[i] = weight[i] + mom[i];
  });
}

void AdamUpdate(int64_t n, const AdamHyper& h, const float* grad, float* weight, float* mean,
                float* var) {
  ForEach(n, h.clip_gradient >= 0.0f, [&](int64_t i, auto clip) {
    float g = grad[i] * h.rescale_grad + weight[i] * h.wd;
    if constexpr (decltype(clip)::value) g = Clip(g, h.clip_gradient);
    mean[i] = h.beta1 * mean[i] + (1.f - h.beta1) * g;
    var[i] = h.beta2 * var[i] + (1.f - h.beta2) * g * g;
    weight[i] = weight[i] - h.lr * mean[i] / (std::sqrt(var[i]) + h.epsilon);
  });
}

void RmsPropUpdate(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                   float* state_n) {
  const bool clip_w = h.clip_weights >= 0.0f;
  ForEach(n, h.clip_gradient >= 0.0f, [&](int64_t i, auto clip) {
    float g = h.rescale_grad * grad[i] + h.wd * weight[i];
    if constexpr (decltype(clip)::value) g = Clip(g, h.clip_gradient);
    state_n[i] = (1.f - h.gamma1) * (g * g) + h.gamma1 * state_n[i];
    const float w = weight[i] - h.lr * (g / std::sqrt(state_n[i] + h.epsilon));
    weight[i] = clip_w ? Clip(w, h.clip_weights) : w;
  });
}

void RmsPropCenteredUpdate(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                           float* state_n, float* state_g, float* delta) {
  const bool clip_w = h.clip_weights >= 0.0f;
  ForEach(n, h.clip_gradient >= 0.0f, [&](int64_t i, auto clip) {
    float g = h.rescale_grad * grad[i] + h.wd * weight[i];
    if constexpr (decltype(clip)::value) g = Clip(g, h.clip_gradient);
    state_n[i] = (1.f - h.gamma1) * g * g + h.gamma1 * state_n[i];
    state_g[i] = (1.f - h.gamma1) * g + h.gamma1 * state_g[i];
    delta[i] = h.gamma2 * delta[i] -
               (h.lr * g / std::sqrt(state_n[i] - state_g[i] * state_g[i] + h.epsilon));
    const float w = weight[i] + delta[i];
    weight[i] = clip_w ? Clip(w, h.clip_weights) : w;
  });
}

void AdaGradUpdate(int64_t n, const AdaGradHyper& h, const float* grad, float* weight,
                   float* history) {
  // MXNet runs this as separate NDArray operations, each rounding to float; so do we.
  ForEach(n, h.clip_gradient >= 0.0f, [&](int64_t i, auto clip) {
    float g = grad[i] * h.rescale_grad;
    if constexpr (decltype(clip)::value) g = Clip(g, h.clip_gradient);
    history[i] = history[i] + g * g;
    const float div = g / std::sqrt(history[i] + h.eps);
    weight[i] = weight[i] + (div + weight[i] * h.wd) * -h.lr;
  });
}

}  // namespace tessera::kvstore::internal

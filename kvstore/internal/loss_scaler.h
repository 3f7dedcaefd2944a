// Dynamic loss scaling as MXNet's AMP and PyTorch's GradScaler do it: the loss's gradient is
// multiplied by a scale so that float16's small gradients do not underflow; each step the
// gradients are divided by it again, and a step whose gradients hold a NaN or an infinity
// (an overflow) is skipped and halves the scale, while kLossScaleGrowthInterval clean steps
// in a row double it. The state lives on the parameters' device and this code runs there
// (in the fused update's kernels, internal/fused_update_host.h on the CPU), so no step waits
// for the host. Plain structs and inline functions, shared by nvcc and g++.
#ifndef TESSERA_KVSTORE_INTERNAL_LOSS_SCALER_H_
#define TESSERA_KVSTORE_INTERNAL_LOSS_SCALER_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera::kvstore::internal {

inline constexpr float kInitialLossScale = 65536.0f;  // 2^16, as MXNet and PyTorch
inline constexpr int64_t kLossScaleGrowthInterval = 2000;
// Bounds of the scale. Below 1 it would shrink gradients; above 2^24 a long run of clean
// steps could grow it to infinity, whose inverse zeroes every gradient. Powers of two keep
// the scaling and its undoing exact.
inline constexpr float kMinLossScale = 1.0f;
inline constexpr float kMaxLossScale = 16777216.0f;  // 2^24

// Beside the scale (which the loss's backward reads, so it is an array of its own).
struct LossScalerState {
  int64_t clean_steps = 0;    // steps without an overflow since the scale last changed
  int64_t skipped_steps = 0;  // steps skipped for an overflow, in all
  int32_t overflow = 0;       // this step's gradients held a NaN or an infinity
  int32_t unused = 0;
};

// After a step: halves the scale on an overflow (the step was skipped), doubles it after
// kLossScaleGrowthInterval clean steps; clears the step's overflow flag.
TESSERA_HOST_DEVICE inline void AdvanceLossScale(LossScalerState* s, float* scale) {
  if (s->overflow != 0) {
    *scale = *scale * 0.5f < kMinLossScale ? kMinLossScale : *scale * 0.5f;
    s->clean_steps = 0;
    ++s->skipped_steps;
  } else if (++s->clean_steps == kLossScaleGrowthInterval) {
    *scale = *scale * 2.0f > kMaxLossScale ? kMaxLossScale : *scale * 2.0f;
    s->clean_steps = 0;
  }
  s->overflow = 0;
}

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_LOSS_SCALER_H_

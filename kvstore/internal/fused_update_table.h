// What one launch of a fused optimizer update reads (apex's multi-tensor apply, MXNet's
// multi_sgd_mom_update): every parameter of one (optimizer kernel, device) in a table, the
// per-step hyperparameters in a table of future steps (a window), and the number of updates
// done so far, all in device memory. Nothing in a launch's arguments changes from step to step, so the
// launches can be captured once into a CUDA graph and replayed (kvstore/fused_update.h).
// Plain structs, shared by nvcc and g++.
#ifndef TESSERA_KVSTORE_INTERNAL_FUSED_UPDATE_TABLE_H_
#define TESSERA_KVSTORE_INTERNAL_FUSED_UPDATE_TABLE_H_

#include <cstdint>

#include "kvstore/internal/loss_scaler.h"

namespace tessera::kvstore::internal {

// The update kernels of update_kernels.h, one per (optimizer, variant).
enum class FusedKind { kSgd, kSgdMom, kAdam, kRmsProp, kRmsPropCentered, kAdaGrad };

// At most this many state arrays per parameter (centered RMSProp's n, g and delta).
inline constexpr int kMaxFusedStates = 3;
// Elements one thread block updates: small enough that a LeNet fills a GPU, large enough
// that a ResNet-50 is a few thousand blocks.
inline constexpr int64_t kFusedChunkElements = 4096;

struct FusedTensor {
  float* grad = nullptr;  // written only by dynamic loss scaling's unscaling
  float* weight = nullptr;
  float* state[kMaxFusedStates] = {nullptr, nullptr, nullptr};
  int64_t n = 0;
  int32_t group = 0;  // the row's column of hyperparameters (same lr_mult and wd_mult)
  int32_t unused = 0;
};

// Elements [begin, min(begin + kFusedChunkElements, n)) of tensors[tensor].
struct FusedChunk {
  int32_t tensor = 0;
  int32_t unused = 0;
  int64_t begin = 0;
};

// The device counters of a fused update: updates applied, and launches that found no row for
// their step (the host fills the rows ahead, so that count stays 0; nonzero is a bug, and the
// update it counts did nothing). With the finiteness check: the first update whose gradients
// held a NaN or an infinity (0: none yet) and the lowest such tensor of that update
// (kNoTensor: none).
inline constexpr int32_t kNoTensor = 0x7fffffff;
struct FusedCounters {
  int64_t steps_done = 0;
  int64_t missed = 0;
  int64_t nonfinite_step = 0;
  int32_t nonfinite_tensor = kNoTensor;
  int32_t unused = 0;
};

// Which steps the rows of hypers are for: row r is the update numbered first_step + r
// (1-based, as Optimizer counts), r < rows, each of `groups` structs. Written by the host
// with the rows, ahead (the groups change with the optimizer's multipliers).
struct FusedWindow {
  int64_t first_step = 1;
  int64_t rows = 0;
  int64_t groups = 1;
};

// Device pointers. hypers holds window->rows rows of window->groups hyperparameter structs
// of the kernel's type (update_kernels.h). A launch updates with the row of update
// counters->steps_done + 1, then counts it. With dynamic loss scaling (loss_scale not null,
// internal/loss_scaler.h) a launch first divides every gradient by *loss_scale in place,
// skips the update when one held a NaN or an infinity (and does not count it: the next
// launch takes the row), and then adjusts the scale.
struct FusedTable {
  const FusedTensor* tensors = nullptr;
  const FusedChunk* chunks = nullptr;
  int32_t num_chunks = 0;
  int32_t unused = 0;
  const FusedWindow* window = nullptr;
  const void* hypers = nullptr;
  FusedCounters* counters = nullptr;
  float* loss_scale = nullptr;
  LossScalerState* scaler = nullptr;
};

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_FUSED_UPDATE_TABLE_H_

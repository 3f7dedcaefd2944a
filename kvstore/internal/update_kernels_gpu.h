// The optimizers' update kernels on the GPU: one launcher per kernel of update_kernels.h,
// taking the same hyperparameter structs and doing the same float32 arithmetic. Every
// operation is rounded on its own (no fused multiply-add), with IEEE division and square
// root, in the CPU loops' order, so a GPU update gives the CPU's values bit for bit when the
// CPU code is not contracted into FMAs either (x86-64 without -mfma, as we build it).
//
// Pointers are device pointers of `n` float32 elements on the current device; the state
// arrays are distinct from each other and from weight and grad (grad may be the weight
// itself, as on the CPU). Each launcher enqueues one grid-stride kernel on `stream` and
// returns cudaGetLastError() of the launch; errors of the kernel itself surface at the next
// synchronization. No CUDA syntax here and no absl, so nvcc compiles the kernels without the
// rest of Tessera and g++ compiles the callers.
//
// Thread safety: the launchers keep no state.
#ifndef TESSERA_KVSTORE_INTERNAL_UPDATE_KERNELS_GPU_H_
#define TESSERA_KVSTORE_INTERNAL_UPDATE_KERNELS_GPU_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kvstore/internal/fused_update_table.h"
#include "kvstore/internal/update_kernels.h"

namespace tessera::kvstore::internal {

cudaError_t SgdUpdateGpu(int64_t n, const SgdHyper& h, const float* grad, float* weight,
                         cudaStream_t stream);
cudaError_t SgdMomUpdateGpu(int64_t n, const SgdHyper& h, const float* grad, float* weight,
                            float* mom, cudaStream_t stream);
cudaError_t AdamUpdateGpu(int64_t n, const AdamHyper& h, const float* grad, float* weight,
                          float* mean, float* var, cudaStream_t stream);
cudaError_t RmsPropUpdateGpu(int64_t n, const RmsPropHyper& h, const float* grad, float* weight,
                             float* state_n, cudaStream_t stream);
cudaError_t RmsPropCenteredUpdateGpu(int64_t n, const RmsPropHyper& h, const float* grad,
                                     float* weight, float* state_n, float* state_g, float* delta,
                                     cudaStream_t stream);
cudaError_t AdaGradUpdateGpu(int64_t n, const AdaGradHyper& h, const float* grad, float* weight,
                             float* history, cudaStream_t stream);

// Every parameter of `table` in one launch of `kind`'s kernel (clip: clip_gradient >= 0, the
// same for every row), then one single-thread launch that counts the step: two launches
// whatever the number of parameters, with arguments that never change (fused_update_table.h).
// The hyperparameter structs in table.hypers are `kind`'s (SgdHyper for kSgd and kSgdMom, ...).
// check_finite: first one more launch that looks for NaN and infinities in every gradient
// and records the first update that had one (FusedCounters), until one is recorded.
cudaError_t FusedUpdateGpu(FusedKind kind, const FusedTable& table, bool clip, bool check_finite,
                           cudaStream_t stream);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_UPDATE_KERNELS_GPU_H_

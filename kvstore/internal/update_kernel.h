// One optimizer update as a value: which kernel of update_kernels.h and its
// hyperparameters, with the host loop (Cpu) and the device launch (Gpu) that run it. An
// Optimizer turns each update's learning rate, weight decay and count into one (KernelFor),
// and both the per-parameter update and the fused one (kvstore/fused_update.h) run them, so
// the two share every line of arithmetic.
#ifndef TESSERA_KVSTORE_INTERNAL_UPDATE_KERNEL_H_
#define TESSERA_KVSTORE_INTERNAL_UPDATE_KERNEL_H_

#include <cstdint>
#include <variant>

#include "kvstore/internal/fused_update_table.h"
#include "kvstore/internal/update_kernels.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "kvstore/internal/update_kernels_gpu.h"
#endif

namespace tessera::kvstore::internal {

// `s` holds the state pointers in the optimizer's order; `stream` is a cudaStream_t.
struct SgdKernel {
  static constexpr const char* kName = "sgd_update";
  static constexpr FusedKind kKind = FusedKind::kSgd;
  static constexpr int kStates = 0;
  SgdHyper h;
  void Cpu(int64_t n, const float* g, float* w, float* const*) const { SgdUpdate(n, h, g, w); }
#if TESSERA_USE_CUDA
  cudaError_t Gpu(int64_t n, const float* g, float* w, float* const*, cudaStream_t stream) const {
    return SgdUpdateGpu(n, h, g, w, stream);
  }
#endif
};

struct SgdMomKernel {
  static constexpr const char* kName = "sgd_mom_update";
  static constexpr FusedKind kKind = FusedKind::kSgdMom;
  static constexpr int kStates = 1;
  SgdHyper h;
  void Cpu(int64_t n, const float* g, float* w, float* const* s) const {
    SgdMomUpdate(n, h, g, w, s[0]);
  }
#if TESSERA_USE_CUDA
  cudaError_t Gpu(int64_t n, const float* g, float* w, float* const* s, cudaStream_t stream) const {
    return SgdMomUpdateGpu(n, h, g, w, s[0], stream);
  }
#endif
};

struct AdamKernel {
  static constexpr const char* kName = "adam_update";
  static constexpr FusedKind kKind = FusedKind::kAdam;
  static constexpr int kStates = 2;
  AdamHyper h;
  void Cpu(int64_t n, const float* g, float* w, float* const* s) const {
    AdamUpdate(n, h, g, w, s[0], s[1]);
  }
#if TESSERA_USE_CUDA
  cudaError_t Gpu(int64_t n, const float* g, float* w, float* const* s, cudaStream_t stream) const {
    return AdamUpdateGpu(n, h, g, w, s[0], s[1], stream);
  }
#endif
};

struct RmsPropKernel {
  static constexpr const char* kName = "rmsprop_update";
  static constexpr FusedKind kKind = FusedKind::kRmsProp;
  static constexpr int kStates = 1;
  RmsPropHyper h;
  void Cpu(int64_t n, const float* g, float* w, float* const* s) const {
    RmsPropUpdate(n, h, g, w, s[0]);
  }
#if TESSERA_USE_CUDA
  cudaError_t Gpu(int64_t n, const float* g, float* w, float* const* s, cudaStream_t stream) const {
    return RmsPropUpdateGpu(n, h, g, w, s[0], stream);
  }
#endif
};

struct RmsPropCenteredKernel {
  static constexpr const char* kName = "rmspropalex_update";
  static constexpr FusedKind kKind = FusedKind::kRmsPropCentered;
  static constexpr int kStates = 3;
  RmsPropHyper h;
  void Cpu(int64_t n, const float* g, float* w, float* const* s) const {
    RmsPropCenteredUpdate(n, h, g, w, s[0], s[1], s[2]);
  }
#if TESSERA_USE_CUDA
  cudaError_t Gpu(int64_t n, const float* g, float* w, float* const* s, cudaStream_t stream) const {
    return RmsPropCenteredUpdateGpu(n, h, g, w, s[0], s[1], s[2], stream);
  }
#endif
};

struct AdaGradKernel {
  static constexpr const char* kName = "adagrad_update";
  static constexpr FusedKind kKind = FusedKind::kAdaGrad;
  static constexpr int kStates = 1;
  AdaGradHyper h;
  void Cpu(int64_t n, const float* g, float* w, float* const* s) const {
    AdaGradUpdate(n, h, g, w, s[0]);
  }
#if TESSERA_USE_CUDA
  cudaError_t Gpu(int64_t n, const float* g, float* w, float* const* s, cudaStream_t stream) const {
    return AdaGradUpdateGpu(n, h, g, w, s[0], stream);
  }
#endif
};

using UpdateKernel = std::variant<SgdKernel, SgdMomKernel, AdamKernel, RmsPropKernel,
                                  RmsPropCenteredKernel, AdaGradKernel>;

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_UPDATE_KERNEL_H_

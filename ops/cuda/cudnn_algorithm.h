// How Convolution and Deconvolution pick their cuDNN algorithms: MXNet's `cudnn_tune`
// (CudnnTune), the three algorithms of one convolution (ChooseConvAlgorithms), and the pick
// from a ranked list under the TF32 policy of gpu_util.h (ChooseAlgorithm).
//
// Tuning. Unless tuning is off, the candidates are measured (cudnnFind*Algorithm, as MXNet's
// default MXNET_CUDNN_AUTOTUNE_DEFAULT=1 and PyTorch's cudnn.benchmark do) rather than ranked
// by cuDNN's heuristics (cudnnGet*Algorithm_v7), which on Hopper often rank a slower kernel
// first. cuDNN measures on buffers it allocates itself (cudaMalloc, which waits for the
// device), once per operator and input shape: in the first pass, which is never captured into
// a CUDA graph (engine/stream_graph.h).
//
// With TF32 off (the default) the first success within the workspace limit that uses plain
// FP32 FMA math wins, else the first that uses no reduced-precision tensor-op math: TF32
// tensor cores would round inputs to 10-bit mantissas and drift from the CPU kernels. With
// TESSERA_ALLOW_TF32=1, cuDNN's first (fastest) success within the limit, whatever its math.
// Stateless.
#ifndef TESSERA_OPS_CUDA_CUDNN_ALGORITHM_H_
#define TESSERA_OPS_CUDA_CUDNN_ALGORITHM_H_

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ops/cuda/gpu_util.h"

namespace tessera::ops::cuda {

// MXNet's `cudnn_tune`.
enum class CudnnTune {
  kOff,               // cuDNN's heuristics, nothing measured
  kLimitedWorkspace,  // measured; the fastest within the `workspace` limit
  kFastest,           // measured; the fastest, whatever workspace it needs
};

// `value` of the parameter cudnn_tune of `op`: off, limited_workspace, fastest, or None
// (unset), which means TESSERA_CUDNN_AUTOTUNE as MXNET_CUDNN_AUTOTUNE_DEFAULT: 0 off,
// 1 limited_workspace (the default), 2 fastest. INVALID_ARGUMENT names a bad value.
absl::StatusOr<CudnnTune> ParseCudnnTune(const std::string& op, const std::string& value);

// The algorithms of the convolution y = conv(x, w) and of its two gradients (Deconvolution
// runs them with the roles of forward and backward-data swapped).
struct ConvAlgorithms {
  cudnnConvolutionFwdAlgoPerf_t fwd;
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data;
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter;
};

// Chooses them for the descriptors with `tune`, after setting conv's math type by the TF32
// policy (FMA; or cuDNN's default math, under which it offers TF32 tensor-core kernels too),
// each within `workspace_limit` bytes unless `tune` is kFastest. A choice is made once per
// process for each device and geometry and shared by every operator that asks again (the .cc
// says why).
// RESOURCE_EXHAUSTED naming `op` when no candidate fits; a cuDNN error (out of memory while
// measuring, too) as the call's status. Thread-safe.
absl::StatusOr<ConvAlgorithms> ChooseConvAlgorithms(const char* op, cudnnHandle_t handle,
                                                    cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w,
                                                    cudnnConvolutionDescriptor_t conv,
                                                    cudnnTensorDescriptor_t y, CudnnTune tune,
                                                    size_t workspace_limit);

// RESOURCE_EXHAUSTED naming `op` and `what` ("forward", "backward-data", ...) when no
// candidate fits `limit` bytes of workspace.
template <typename Perf>
absl::StatusOr<Perf> ChooseAlgorithm(const char* op, const char* what, const Perf* perf, int count,
                                     size_t limit) {
  const bool tf32 = AllowTf32();
  for (int pass = tf32 ? 1 : 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit) continue;
      if (pass == 0 && perf[i].mathType != CUDNN_FMA_MATH) continue;
      if (pass == 1 && !tf32 && perf[i].mathType != CUDNN_DEFAULT_MATH &&
          perf[i].mathType != CUDNN_FMA_MATH) {
        continue;
      }
      return perf[i];
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(op, ": no cuDNN ", what,
                                                   " algorithm fits the workspace limit of ", limit,
                                                   " bytes; raise `workspace`"));
}

}  // namespace tessera::ops::cuda

#endif  // TESSERA_OPS_CUDA_CUDNN_ALGORITHM_H_

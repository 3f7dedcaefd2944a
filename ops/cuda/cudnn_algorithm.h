// ChooseAlgorithm: which of cuDNN's ranked convolution algorithms (cudnnGet*Algorithm_v7 perf
// results) Convolution and Deconvolution run, under the TF32 policy of gpu_util.h.
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

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ops/cuda/gpu_util.h"

namespace tessera::ops::cuda {

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

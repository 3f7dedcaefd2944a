// CUDNN_RETURN_IF_ERROR: runs a cuDNN call and returns an absl::Status naming the call, file
// and line when it fails, like CUDA_RETURN_IF_ERROR (core/cuda_status.h) for the runtime.
// Only for code built with CUDA (ops/cuda is compiled only under --config=cuda).
#ifndef TESSERA_OPS_CUDA_CUDNN_STATUS_H_
#define TESSERA_OPS_CUDA_CUDNN_STATUS_H_

#include <cudnn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {

inline absl::Status CudnnStatus(cudnnStatus_t err, const char* call, const char* file, int line) {
  if (err == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cudnnGetErrorString(err), " (", static_cast<int>(err),
                                          ")"));
}

}  // namespace tessera

#define CUDNN_RETURN_IF_ERROR(call)                                \
  do {                                                             \
    ::absl::Status tessera_cudnn_status_ =                         \
        ::tessera::CudnnStatus((call), #call, __FILE__, __LINE__); \
    if (!tessera_cudnn_status_.ok()) return tessera_cudnn_status_; \
  } while (false)

#endif  // TESSERA_OPS_CUDA_CUDNN_STATUS_H_

// CUBLAS_RETURN_IF_ERROR: runs a cuBLAS call and returns an absl::Status naming the call, file
// and line when it fails, like CUDA_RETURN_IF_ERROR (core/cuda_status.h) for the runtime.
// Only for code built with CUDA (ops/cuda is compiled only under --config=cuda).
#ifndef TESSERA_OPS_CUDA_CUBLAS_STATUS_H_
#define TESSERA_OPS_CUDA_CUBLAS_STATUS_H_

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {

inline absl::Status CublasStatus(cublasStatus_t err, const char* call, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cublasGetStatusName(err), " (",
                                          cublasGetStatusString(err), ")"));
}

}  // namespace tessera

#define CUBLAS_RETURN_IF_ERROR(call)                                 \
  do {                                                               \
    ::absl::Status tessera_cublas_status_ =                          \
        ::tessera::CublasStatus((call), #call, __FILE__, __LINE__);  \
    if (!tessera_cublas_status_.ok()) return tessera_cublas_status_; \
  } while (false)

#endif  // TESSERA_OPS_CUDA_CUBLAS_STATUS_H_

// CUDA_RETURN_IF_ERROR: runs a CUDA runtime call and returns an absl::Status naming the
// call, file and line when it fails (RESOURCE_EXHAUSTED for out of memory, else INTERNAL). Only defined when built with CUDA
// (TESSERA_USE_CUDA, set by //third_party:cuda under --config=cuda).
#ifndef TESSERA_CORE_CUDA_STATUS_H_
#define TESSERA_CORE_CUDA_STATUS_H_

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {

// Out of device memory is RESOURCE_EXHAUSTED naming the device (a caller that knows the bytes
// it asked for adds them); every other CUDA error is INTERNAL.
inline absl::Status CudaStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  if (err == cudaErrorMemoryAllocation) {
    int device = -1;
    cudaGetDevice(&device);
    return absl::ResourceExhaustedError(absl::StrCat("out of memory on gpu(", device, "): ", call,
                                                     " failed at ", file, ":", line));
  }
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cudaGetErrorName(err), " (",
                                          cudaGetErrorString(err), ")"));
}

}  // namespace tessera

#define CUDA_RETURN_IF_ERROR(call)                                                   \
  do {                                                                               \
    ::absl::Status tessera_cuda_status_ =                                            \
        ::tessera::CudaStatus((call), #call, __FILE__, __LINE__);                    \
    if (!tessera_cuda_status_.ok()) return tessera_cuda_status_;                     \
  } while (false)

#endif  // TESSERA_USE_CUDA
#endif  // TESSERA_CORE_CUDA_STATUS_H_

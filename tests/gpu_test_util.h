// Whether a test can use a GPU: NoGpuReason() is empty when a CUDA device is usable, else the
// reason (built without CUDA, no driver, no device), and TESSERA_SKIP_WITHOUT_GPU() skips the
// current test with that reason. Every GPU test skips this way, so CI stays green on machines
// without a GPU and the GPU bundle runs the same tests where there is one.
#ifndef TESSERA_TESTS_GPU_TEST_UTIL_H_
#define TESSERA_TESTS_GPU_TEST_UTIL_H_

#include <string>

#include "gtest/gtest.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::testing {

inline std::string NoGpuReason() {
#if TESSERA_USE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later calls
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
  }
  return count == 0 ? "cudaGetDeviceCount returned 0" : "";
#else
  return "built without CUDA (configure with --config=cuda)";
#endif
}

}  // namespace tessera::testing

#define TESSERA_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                    \
    const std::string tessera_no_gpu_ = ::tessera::testing::NoGpuReason();                \
    if (!tessera_no_gpu_.empty()) GTEST_SKIP() << "no CUDA device: " << tessera_no_gpu_; \
  } while (false)

#endif  // TESSERA_TESTS_GPU_TEST_UTIL_H_

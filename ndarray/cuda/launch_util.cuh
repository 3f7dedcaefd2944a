// Device-side helpers every Tessera .cu file shares: the launch geometry of grid-stride
// loops, the OpReqType store, and the typed element access of the half types. CUDA syntax:
// include it from .cu files only.
#ifndef TESSERA_NDARRAY_CUDA_LAUNCH_UTIL_CUH_
#define TESSERA_NDARRAY_CUDA_LAUNCH_UTIL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

inline constexpr int kThreads = 256;
// Grid-stride loops: enough blocks to fill an H100 several times over, never more than the
// work needs.
inline constexpr int64_t kMaxBlocks = 4096;

inline int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// The first index of this thread and the stride of a grid-stride loop over [0, n).
__device__ __forceinline__ int64_t GridStart() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() { return int64_t{gridDim.x} * blockDim.x; }

// *out per req (0 null, 1 write, 2 write in place, 3 add to) = v.
template <typename T>
__device__ __forceinline__ void Store(T* out, int req, T v) {
  if (req == 3) {
    *out += v;
  } else if (req != 0) {
    *out = v;
  }
}

}  // namespace tessera::cuda

#endif  // TESSERA_NDARRAY_CUDA_LAUNCH_UTIL_CUH_

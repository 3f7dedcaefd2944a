// Test data for the GPU operator tests: values as doubles, converted to and from any dtype's
// bytes, and DeviceArray, GPU memory holding such values. Failures inside are gtest failures
// (test-only code). Without CUDA only the conversions exist.
#ifndef TESSERA_TESTS_OPS_CUDA_DEVICE_ARRAY_H_
#define TESSERA_TESTS_OPS_CUDA_DEVICE_ARRAY_H_

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"

namespace tessera::ops::testing {

using Values = std::vector<double>;

// `v` stored as dtype t (through AccType, as the kernels store), and back.
std::vector<char> ToBytes(const Values& v, DType t);
Values FromBytes(const char* p, int64_t n, DType t);
Values FromBytes(const std::vector<char>& bytes, DType t);
// `v` as dtype t holds it (integers round toward zero, floats to their precision).
Values Representable(const Values& v, DType t);

#if TESSERA_USE_CUDA
// cudaMalloc'ed memory of one array on gpu(0), freed on destruction.
class DeviceArray {
 public:
  // Uninitialized, of `shape`.
  DeviceArray(const Shape& shape, DType dtype);
  // A 1-D array holding `v`.
  DeviceArray(const Values& v, DType dtype);
  ~DeviceArray();
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void Upload(const Values& v);
  // After the whole device is idle (cudaDeviceSynchronize).
  Values Download() const;
  TBlob blob() const { return blob(shape_); }
  // The memory viewed as `shape` (of the same size).
  TBlob blob(const Shape& shape) const;

 private:
  Shape shape_;
  DType dtype_;
  void* ptr_ = nullptr;
};
#endif  // TESSERA_USE_CUDA

}  // namespace tessera::ops::testing

#endif  // TESSERA_TESTS_OPS_CUDA_DEVICE_ARRAY_H_

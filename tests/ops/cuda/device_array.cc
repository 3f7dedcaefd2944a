// Test data conversions and DeviceArray (see device_array.h).
#include "tests/ops/cuda/device_array.h"

#include <algorithm>

#include "gtest/gtest.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::ops::testing {

std::vector<char> ToBytes(const Values& v, DType t) {
  std::vector<char> bytes(v.size() * DTypeSize(t));
  TESSERA_TYPE_SWITCH(t, T,
                      {
                        T* p = reinterpret_cast<T*>(bytes.data());
                        for (size_t i = 0; i < v.size(); ++i)
                          p[i] = static_cast<T>(static_cast<AccType<T>>(v[i]));
                      },
                      {});
  return bytes;
}

Values FromBytes(const char* p, int64_t n, DType t) {
  Values v(n);
  TESSERA_TYPE_SWITCH(t, T,
                      {
                        const T* q = reinterpret_cast<const T*>(p);
                        for (int64_t i = 0; i < n; ++i)
                          v[i] = static_cast<double>(static_cast<AccType<T>>(q[i]));
                      },
                      {});
  return v;
}

Values FromBytes(const std::vector<char>& bytes, DType t) {
  return FromBytes(bytes.data(), static_cast<int64_t>(bytes.size() / DTypeSize(t)), t);
}

Values Representable(const Values& v, DType t) { return FromBytes(ToBytes(v, t), t); }

#if TESSERA_USE_CUDA

DeviceArray::DeviceArray(const Shape& shape, DType dtype) : shape_(shape), dtype_(dtype) {
  const size_t bytes = std::max<size_t>(shape.Size() * DTypeSize(dtype), 1);
  EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
}

DeviceArray::DeviceArray(const Values& v, DType dtype)
    : DeviceArray(Shape{static_cast<int64_t>(v.size())}, dtype) {
  Upload(v);
}

DeviceArray::~DeviceArray() { cudaFree(ptr_); }

void DeviceArray::Upload(const Values& v) {
  const std::vector<char> bytes = ToBytes(v, dtype_);
  EXPECT_EQ(cudaMemcpy(ptr_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

Values DeviceArray::Download() const {
  std::vector<char> bytes(shape_.Size() * DTypeSize(dtype_));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(bytes.data(), ptr_, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return FromBytes(bytes, dtype_);
}

TBlob DeviceArray::blob(const Shape& shape) const {
  // Field by field: through TBlob's constructor, which moves a Shape (an absl::InlinedVector),
  // GCC's -Wmaybe-uninitialized misfires once inlined into callers.
  TBlob b;
  b.dptr = ptr_;
  b.shape = shape;
  b.dtype = dtype_;
  b.ctx = Context::GPU(0);
  return b;
}

#endif  // TESSERA_USE_CUDA

}  // namespace tessera::ops::testing

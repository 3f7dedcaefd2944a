// Element types in device code: the arithmetic type of each storage type (float for the half
// types, as core/dtype.h's AccType on the host), conversions both ways, the OpReqType store
// done in that arithmetic type, and switches from an ElemType (tensor_kernels.h) to the
// device type. CUDA syntax: include it from .cu files only.
#ifndef TESSERA_NDARRAY_CUDA_ELEMENT_TYPES_CUH_
#define TESSERA_NDARRAY_CUDA_ELEMENT_TYPES_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ndarray/cuda/tensor_kernels.h"

namespace tessera::cuda {

template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<__half> {
  using type = float;
};
template <>
struct AccOf<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using Acc = typename AccOf<T>::type;

template <typename T>
__host__ __device__ __forceinline__ T ToAcc(T v) {
  return v;
}
__host__ __device__ __forceinline__ float ToAcc(__half v) { return __half2float(v); }
__host__ __device__ __forceinline__ float ToAcc(__nv_bfloat16 v) { return __bfloat162float(v); }

// Rounds to nearest even into the half types; integers wrap (C++20 conversions are modular),
// as on the CPU.
template <typename T>
__host__ __device__ __forceinline__ T FromAcc(Acc<T> v) {
  return static_cast<T>(v);
}
template <>
__host__ __device__ __forceinline__ __half FromAcc<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 FromAcc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// *out per req (0 null, 1 write, 2 write in place, 3 add to) = v, the kAddTo sum taken in
// Acc<T> (core/tblob.h's Assign).
template <typename T>
__host__ __device__ __forceinline__ void StoreAcc(T* out, int req, Acc<T> v) {
  if (req == 3) {
    *out = FromAcc<T>(ToAcc(*out) + v);
  } else if (req != 0) {
    *out = FromAcc<T>(v);
  }
}

}  // namespace tessera::cuda

// `switch (type)` over an ElemType with `T` the device type in each case; other values make
// the enclosing function return cudaErrorInvalidValue.
#define TESSERA_ELEM_CASE_(value, type_, T, ...) \
  case ::tessera::cuda::ElemType::value: {       \
    using T = type_;                             \
    __VA_ARGS__;                                 \
  } break;

#define TESSERA_ELEM_FLOAT_SWITCH(type, T, ...)                  \
  switch (type) {                                                \
    TESSERA_ELEM_CASE_(kFloat32, float, T, __VA_ARGS__)          \
    TESSERA_ELEM_CASE_(kFloat64, double, T, __VA_ARGS__)         \
    TESSERA_ELEM_CASE_(kFloat16, __half, T, __VA_ARGS__)         \
    TESSERA_ELEM_CASE_(kBFloat16, __nv_bfloat16, T, __VA_ARGS__) \
    default:                                                     \
      return cudaErrorInvalidValue;                              \
  }

#define TESSERA_ELEM_TYPE_SWITCH(type, T, ...)                   \
  switch (type) {                                                \
    TESSERA_ELEM_CASE_(kFloat32, float, T, __VA_ARGS__)          \
    TESSERA_ELEM_CASE_(kFloat64, double, T, __VA_ARGS__)         \
    TESSERA_ELEM_CASE_(kFloat16, __half, T, __VA_ARGS__)         \
    TESSERA_ELEM_CASE_(kBFloat16, __nv_bfloat16, T, __VA_ARGS__) \
    TESSERA_ELEM_CASE_(kUInt8, uint8_t, T, __VA_ARGS__)          \
    TESSERA_ELEM_CASE_(kInt8, int8_t, T, __VA_ARGS__)            \
    TESSERA_ELEM_CASE_(kInt32, int32_t, T, __VA_ARGS__)          \
    TESSERA_ELEM_CASE_(kInt64, int64_t, T, __VA_ARGS__)          \
    default:                                                     \
      return cudaErrorInvalidValue;                              \
  }

#endif  // TESSERA_NDARRAY_CUDA_ELEMENT_TYPES_CUH_

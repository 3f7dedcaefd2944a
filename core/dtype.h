// DType: the element types of arrays, with the half-precision storage types and a switch
// macro that instantiates a kernel for each.
//
// float16 and bfloat16 are storage types: kernels load them into float (AccType), compute
// there and round back on store, as cuDNN and oneDNN do for their mixed-precision paths.
// Plain value types, thread-compatible.
#ifndef TESSERA_CORE_DTYPE_H_
#define TESSERA_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Values are stable: they go into saved files and the Tensor protobuf.
enum class DType : int8_t {
  kUnknown = -1,  // only during type inference
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kUInt8 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kInt64 = 6,
  kBFloat16 = 12,
};

// IEEE 754 binary16, stored as bits. Converts to and from float with round-to-nearest-even.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT(google-explicit-constructor): behaves like a float type
  operator float() const;
};

// bfloat16: the high half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT(google-explicit-constructor)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a (quiet) NaN
    } else {
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// The type arithmetic on T is done in: float for the half types, T otherwise.
template <typename T>
struct AccTypeOf {
  using type = T;
};
template <>
struct AccTypeOf<Half> {
  using type = float;
};
template <>
struct AccTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using AccType = typename AccTypeOf<T>::type;

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() { return DType::kFloat32; }
template <>
constexpr DType DTypeOf<double>() { return DType::kFloat64; }
template <>
constexpr DType DTypeOf<Half>() { return DType::kFloat16; }
template <>
constexpr DType DTypeOf<BFloat16>() { return DType::kBFloat16; }
template <>
constexpr DType DTypeOf<uint8_t>() { return DType::kUInt8; }
template <>
constexpr DType DTypeOf<int8_t>() { return DType::kInt8; }
template <>
constexpr DType DTypeOf<int32_t>() { return DType::kInt32; }
template <>
constexpr DType DTypeOf<int64_t>() { return DType::kInt64; }

// Bytes per element; 0 for kUnknown.
size_t DTypeSize(DType dtype);
bool IsFloatingPoint(DType dtype);
// "float32", "float64", "float16", "bfloat16", "uint8", "int8", "int32", "int64", "unknown".
const char* DTypeName(DType dtype);
// Accepts the names above (and "float" / "double" / "half"); INVALID_ARGUMENT otherwise.
absl::StatusOr<DType> ParseDType(absl::string_view name);
// True for the values of the enum except kUnknown, e.g. to validate a byte read from a file.
bool IsValidDType(int value);

}  // namespace tessera

// One case of the switches below: `body` with DT aliased to `type`.
#define TESSERA_DTYPE_CASE_(value, type, DT, body) \
  case ::tessera::DType::value: {                  \
    using DT = type;                               \
    body;                                          \
  } break;

// TESSERA_FLOAT_TYPE_SWITCH over the floating-point types only (what neural-network kernels
// support); `default_body` runs for every other dtype.
#define TESSERA_FLOAT_TYPE_SWITCH(dtype, DT, body, default_body)            \
  switch (dtype) {                                                          \
    TESSERA_DTYPE_CASE_(kFloat32, float, DT, body)                          \
    TESSERA_DTYPE_CASE_(kFloat64, double, DT, body)                         \
    TESSERA_DTYPE_CASE_(kFloat16, ::tessera::Half, DT, body)                \
    TESSERA_DTYPE_CASE_(kBFloat16, ::tessera::BFloat16, DT, body)           \
    default: {                                                              \
      default_body;                                                         \
    } break;                                                                \
  }

// TESSERA_TYPE_SWITCH(dtype, DT, { body }, default_body): runs `body` with DT aliased to the
// C++ type of `dtype`. `default_body` runs for kUnknown or a value outside the enum.
#define TESSERA_TYPE_SWITCH(dtype, DT, body, default_body)                  \
  switch (dtype) {                                                          \
    TESSERA_DTYPE_CASE_(kFloat32, float, DT, body)                          \
    TESSERA_DTYPE_CASE_(kFloat64, double, DT, body)                         \
    TESSERA_DTYPE_CASE_(kFloat16, ::tessera::Half, DT, body)                \
    TESSERA_DTYPE_CASE_(kBFloat16, ::tessera::BFloat16, DT, body)           \
    TESSERA_DTYPE_CASE_(kUInt8, uint8_t, DT, body)                          \
    TESSERA_DTYPE_CASE_(kInt8, int8_t, DT, body)                            \
    TESSERA_DTYPE_CASE_(kInt32, int32_t, DT, body)                          \
    TESSERA_DTYPE_CASE_(kInt64, int64_t, DT, body)                          \
    default: {                                                              \
      default_body;                                                         \
    } break;                                                                \
  }

#endif  // TESSERA_CORE_DTYPE_H_

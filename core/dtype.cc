#include "core/dtype.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera {

Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep it quiet
    bits = static_cast<uint16_t>(sign | 0x7e00u);
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: infinity
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Scale into the subnormal grid (units of 2^-24) and round to nearest even.
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    const float scaled = magnitude * 16777216.0f;  // 2^24
    uint32_t q = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    bits = static_cast<uint16_t>(sign | q);
    return;
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits.
  uint32_t rebased = abs - 0x38000000u;
  rebased += 0x0fffu + ((rebased >> 13) & 1u);
  bits = static_cast<uint16_t>(sign | (rebased >> 13));
}

Half::operator float() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t x;
  if (exponent == 0x1f) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    const float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // m * 2^-24
    std::memcpy(&x, &value, 4);
    x |= sign;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kUInt8:
    case DType::kInt8:
      return 1;
    case DType::kUnknown:
      break;
  }
  return 0;
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUnknown:
      break;
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  static constexpr DType kAll[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                   DType::kBFloat16, DType::kUInt8,   DType::kInt8,
                                   DType::kInt32,   DType::kInt64};
  for (DType dtype : kAll) {
    if (name == DTypeName(dtype)) return dtype;
  }
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  if (name == "half") return DType::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name,
                   "' (expected float32, float64, float16, bfloat16, uint8, int8, int32 or int64)"));
}

bool IsValidDType(int value) {
  // DType is int8_t underneath: the cast below would keep only the low byte, and a file's
  // dtype 0x03000004 would read as int32.
  if (value < INT8_MIN || value > INT8_MAX) return false;
  switch (static_cast<DType>(value)) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    case DType::kUnknown:
      break;
  }
  return false;
}

}  // namespace tessera

#include "kvstore/internal/two_bit.h"

#include <cstring>

namespace tessera::kvstore::internal {
namespace {

constexpr uint8_t kPositive[] = {0xc0, 0x30, 0x0c, 0x03};
constexpr uint8_t kNegative[] = {0x80, 0x20, 0x08, 0x02};

}  // namespace

void QuantizeTwoBit(const float* grad, float* residual, int64_t n, float threshold, char* out) {
  std::memset(out, 0, TwoBitBytes(n));
  auto* bytes = reinterpret_cast<uint8_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    residual[i] += grad[i];
    uint8_t& byte = bytes[i >> 2];
    if (residual[i] >= threshold) {
      byte |= kPositive[i & 3];
      residual[i] -= threshold;
    } else if (residual[i] <= -threshold) {
      byte |= kNegative[i & 3];
      residual[i] += threshold;
    }
  }
}

void DequantizeTwoBit(const char* in, int64_t n, float threshold, float* out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(in);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t bits = bytes[i >> 2] & kPositive[i & 3];
    out[i] = bits == kPositive[i & 3] ? threshold : bits == kNegative[i & 3] ? -threshold : 0.0f;
  }
}

}  // namespace tessera::kvstore::internal

#include "kvstore/internal/push_compression.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "kvstore/internal/two_bit.h"

namespace tessera::kvstore::internal {

absl::Status CheckCompression(const GradientCompression& c) {
  if (c.type() == "2bit") {
    if (!(c.threshold() > 0) || !std::isfinite(c.threshold())) {
      return absl::InvalidArgumentError(
          absl::StrCat("2bit compression's threshold ", c.threshold(), " must be a positive number"));
    }
    return absl::OkStatus();
  }
  if (c.type() == "fp16") {
    if (c.threshold() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("fp16 compression takes no threshold (got ", c.threshold(), ")"));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", c.type(), "' is not a compression (known: 2bit, fp16)"));
}

uint64_t CompressedBytes(const GradientCompression& c, int64_t n) {
  return c.type() == "2bit" ? TwoBitBytes(n) : static_cast<uint64_t>(n) * sizeof(Half);
}

void CompressPush(const GradientCompression& c, const float* grad, float* residual, int64_t n,
                  char* out) {
  if (c.type() == "2bit") return QuantizeTwoBit(grad, residual, n, c.threshold(), out);
  for (int64_t i = 0; i < n; ++i) {
    residual[i] += grad[i];
    const Half h(residual[i]);
    residual[i] -= static_cast<float>(h);
    std::memcpy(out + i * sizeof(Half), &h.bits, sizeof(h.bits));
  }
}

void DecompressPush(const GradientCompression& c, const char* in, int64_t n, float* out) {
  if (c.type() == "2bit") return DequantizeTwoBit(in, n, c.threshold(), out);
  for (int64_t i = 0; i < n; ++i) {
    Half h;
    std::memcpy(&h.bits, in + i * sizeof(Half), sizeof(h.bits));
    out[i] = static_cast<float>(h);
  }
}

}  // namespace tessera::kvstore::internal

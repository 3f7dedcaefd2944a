#include "kvstore/internal/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "kvstore/internal/two_bit.h"
#include "ndarray/internal/half_convert.h"

namespace tessera::kvstore::internal {
namespace {

// The bulk conversions work through buffers of this many values on the stack:
// `convert(begin, m)` for each block [begin, begin + m) of `n` values.
constexpr int64_t kBlock = 1024;
template <typename Convert>
void InBlocks(int64_t n, Convert convert) {
  for (int64_t begin = 0; begin < n; begin += kBlock) convert(begin, std::min(kBlock, n - begin));
}

absl::Status Fail(std::string* field, const char* name, std::string message) {
  if (field != nullptr) *field = name;
  return absl::InvalidArgumentError(std::move(message));
}

}  // namespace

absl::Status CheckCompression(const GradientCompression& c, std::string* field) {
  if (c.type() == "2bit") {
    if (!(c.threshold() > 0) || !std::isfinite(c.threshold())) {
      return Fail(field, "threshold",
                  absl::StrCat("2bit compression's threshold ", c.threshold(), " must be a positive number"));
    }
  } else if (c.type() == "fp16" || c.type().empty()) {
    if (c.threshold() != 0) {
      return Fail(field, c.type().empty() ? "type" : "threshold",
                  c.type().empty() ? std::string("a threshold needs a type (2bit)")
                                   : absl::StrCat("fp16 compression takes no threshold (got ", c.threshold(), ")"));
    }
  } else {
    return Fail(field, "type", absl::StrCat("'", c.type(), "' is not a compression (known: 2bit, fp16)"));
  }
  if (!c.pull_type().empty() && c.pull_type() != "bf16") {
    return Fail(field, "pull_type",
                absl::StrCat("'", c.pull_type(), "' is not a compression of the pulls (known: bf16)"));
  }
  return absl::OkStatus();
}

std::string DescribeCompression(const GradientCompression& c) {
  std::string pushes = c.type().empty()    ? std::string("uncompressed")
                       : c.type() == "2bit" ? absl::StrCat("2bit (threshold ", c.threshold(), ")")
                                            : c.type();
  if (!c.pull_type().empty()) absl::StrAppend(&pushes, " with ", c.pull_type(), " pulls");
  return pushes;
}

uint64_t CompressedBytes(const GradientCompression& c, int64_t n) {
  return c.type() == "2bit" ? TwoBitBytes(n) : static_cast<uint64_t>(n) * sizeof(Half);
}

void CompressPush(const GradientCompression& c, const float* grad, float* residual, int64_t n,
                  char* out) {
  if (c.type() == "2bit") return QuantizeTwoBit(grad, residual, n, c.threshold(), out);
  // fp16, a block at a time with the CPU's conversions: the same round-to-nearest-even as Half.
  InBlocks(n, [&](int64_t begin, int64_t m) {
    float sum[kBlock], sent[kBlock];
    Half half[kBlock];
    for (int64_t i = 0; i < m; ++i) sum[i] = residual[begin + i] + grad[begin + i];
    math::internal::FloatToHalf(sum, half, m);
    math::internal::HalfToFloat(half, sent, m);
    for (int64_t i = 0; i < m; ++i) residual[begin + i] = sum[i] - sent[i];
    std::memcpy(out + begin * sizeof(Half), half, m * sizeof(Half));
  });
}

void DecompressPush(const GradientCompression& c, const char* in, int64_t n, float* out) {
  if (c.type() == "2bit") return DequantizeTwoBit(in, n, c.threshold(), out);
  InBlocks(n, [&](int64_t begin, int64_t m) {
    Half half[kBlock];
    std::memcpy(half, in + begin * sizeof(Half), m * sizeof(Half));
    math::internal::HalfToFloat(half, out + begin, m);
  });
}

bool PullsInBFloat16(const GradientCompression& c) { return c.pull_type() == "bf16"; }

void PackPull(const float* values, int64_t n, char* out) {
  InBlocks(n, [&](int64_t begin, int64_t m) {
    BFloat16 packed[kBlock];
    math::internal::FloatToBFloat16(values + begin, packed, m);
    std::memcpy(out + begin * sizeof(BFloat16), packed, m * sizeof(BFloat16));
  });
}

void UnpackPull(const char* in, int64_t n, float* out) {
  InBlocks(n, [&](int64_t begin, int64_t m) {
    BFloat16 packed[kBlock];
    std::memcpy(packed, in + begin * sizeof(BFloat16), m * sizeof(BFloat16));
    math::internal::BFloat16ToFloat(packed, out + begin, m);
  });
}

void RoundPull(const float* in, int64_t n, float* out) {
  InBlocks(n, [&](int64_t begin, int64_t m) {
    BFloat16 packed[kBlock];
    math::internal::FloatToBFloat16(in + begin, packed, m);
    math::internal::BFloat16ToFloat(packed, out + begin, m);
  });
}

}  // namespace tessera::kvstore::internal

#include "kvstore/internal/two_bit.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::kvstore::internal {
namespace {

// Bit k of a 4-bit group moved to bit 6 - 2k: the low bit of value k's pair in its byte.
constexpr uint8_t Spread(uint32_t bits) {
  uint8_t out = 0;
  for (int k = 0; k < 4; ++k) out |= static_cast<uint8_t>(((bits >> k) & 1u) << (6 - 2 * k));
  return out;
}

// The 4 bytes of a 16-value word from its values' flags (bit k: value k): a pair is 11 where
// the value went +threshold, 10 where it went -threshold.
void PackWord(uint32_t positive, uint32_t negative, uint8_t* out) {
  const uint32_t sent = positive | negative;
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(Spread(sent >> (4 * j) & 15u) << 1 | Spread(positive >> (4 * j) & 15u));
  }
}

// Values [begin, begin + m), m <= 16, as one word: MXNet's loop without its branches.
void QuantizeWord(const float* grad, float* residual, int64_t m, float threshold, uint8_t* out) {
  uint32_t positive = 0, negative = 0;
  for (int64_t k = 0; k < m; ++k) {
    const float r = residual[k] + grad[k];
    const bool p = r >= threshold, q = r <= -threshold;
    residual[k] = p ? r - threshold : q ? r + threshold : r;
    positive |= uint32_t{p} << k;
    negative |= uint32_t{q} << k;
  }
  PackWord(positive, negative, out);
}

#if defined(__x86_64__)
bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// 16 values a step: the comparisons give the word's flags directly, and the masked add and
// subtract are the scalar loop's arithmetic (a NaN compares false both ways and stays).
__attribute__((target("avx512f"))) int64_t QuantizeAvx512(const float* grad, float* residual, int64_t n,
                                                         float threshold, uint8_t* out) {
  const __m512 t = _mm512_set1_ps(threshold), minus_t = _mm512_set1_ps(-threshold);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_add_ps(_mm512_loadu_ps(residual + i), _mm512_loadu_ps(grad + i));
    const __mmask16 p = _mm512_cmp_ps_mask(r, t, _CMP_GE_OQ);
    const __mmask16 q = _mm512_cmp_ps_mask(r, minus_t, _CMP_LE_OQ);
    _mm512_storeu_ps(residual + i, _mm512_mask_add_ps(_mm512_mask_sub_ps(r, p, r, t), q, r, t));
    PackWord(p, q, out + i / 4);
  }
  return i;
}

// 16 values a step: each lane shifts the word to its pair and looks its value up.
__attribute__((target("avx512f"))) int64_t DequantizeAvx512(const uint8_t* in, int64_t n, float threshold,
                                                           float* out) {
  // Lane k's pair: byte k / 4, bits 6 - 2 (k % 4) and up, in the little-endian word.
  const __m512i shift = _mm512_setr_epi32(6, 4, 2, 0, 14, 12, 10, 8, 22, 20, 18, 16, 30, 28, 26, 24);
  const __m512 value = _mm512_setr_ps(0.0f, 0.0f, -threshold, threshold, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t word;
    std::memcpy(&word, in + i / 4, 4);
    const __m512i code = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shift),
                                          _mm512_set1_epi32(3));
    _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(code, value));
  }
  return i;
}
#endif

}  // namespace

void QuantizeTwoBit(const float* grad, float* residual, int64_t n, float threshold, char* out) {
  auto* bytes = reinterpret_cast<uint8_t*>(out);
  int64_t done = 0;
#if defined(__x86_64__)
  if (HasAvx512()) done = QuantizeAvx512(grad, residual, n, threshold, bytes);
#endif
  for (int64_t begin = done; begin < n; begin += 16) {
    QuantizeWord(grad + begin, residual + begin, std::min<int64_t>(16, n - begin), threshold, bytes + begin / 4);
  }
}

void DequantizeTwoBit(const char* in, int64_t n, float threshold, float* out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(in);
  int64_t i = 0;
#if defined(__x86_64__)
  if (HasAvx512()) i = DequantizeAvx512(bytes, n, threshold, out);
#endif
  const float value[4] = {0.0f, 0.0f, -threshold, threshold};  // by the pair's bits; 01 is 0
  for (; i < n; ++i) out[i] = value[(bytes[i >> 2] >> (6 - 2 * (i & 3))) & 3u];
}

}  // namespace tessera::kvstore::internal

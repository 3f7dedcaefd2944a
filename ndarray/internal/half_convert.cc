#include "ndarray/internal/half_convert.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::math::internal {
namespace {

#if defined(__x86_64__)
bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = Half(in[i]);
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// FloatToBFloat16's rounding, 8 at a time.
__attribute__((target("avx2"))) void FloatToBFloat16Avx2(const float* in, BFloat16* out, int64_t n) {
  const __m256i round = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    const __m256i high = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, round),
                                                               _mm256_and_si256(high, one)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i bits = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // 8 x 32-bit to 8 x 16-bit (values < 2^16: unsigned saturation keeps them), in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) out[i] = BFloat16(in[i]);
}

__attribute__((target("avx2"))) void BFloat16ToFloatAvx2(const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(wide, 16));
  }
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}
#endif

}  // namespace

void FloatToHalf(const float* in, Half* out, int64_t n) {
#if defined(__x86_64__)
  if (HasF16c()) return FloatToHalfF16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = Half(in[i]);
}

void HalfToFloat(const Half* in, float* out, int64_t n) {
#if defined(__x86_64__)
  if (HasF16c()) return HalfToFloatF16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

// BFloat16(float) without its branch: the same bits.
void FloatToBFloat16(const float* in, BFloat16* out, int64_t n) {
#if defined(__x86_64__)
  if (HasAvx2()) return FloatToBFloat16Avx2(in, out, n);
#endif
  uint16_t* bits = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, in + i, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    bits[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

void BFloat16ToFloat(const BFloat16* in, float* out, int64_t n) {
#if defined(__x86_64__)
  if (HasAvx2()) return BFloat16ToFloatAvx2(in, out, n);
#endif
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(out + i, &u, 4);
  }
}

}  // namespace tessera::math::internal

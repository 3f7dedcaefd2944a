// Bulk conversions between float32 and the 16-bit float types: the values Half and BFloat16
// give one at a time (round-to-nearest-even; a NaN stays a NaN), many at a time - with the
// F16C instructions for float16 and AVX2 for bfloat16 where the CPU has them (x86-64 since
// 2012 and 2013), plain loops elsewhere. Mixed precision converts every product's
// operands this way on the CPU (ops/nn/dnnl_util.h, amp_cast), so it must not cost more than
// the product. Stateless; safe from any thread.
#ifndef TESSERA_NDARRAY_INTERNAL_HALF_CONVERT_H_
#define TESSERA_NDARRAY_INTERNAL_HALF_CONVERT_H_

#include <cstdint>

#include "core/dtype.h"

namespace tessera::math::internal {

void FloatToHalf(const float* in, Half* out, int64_t n);
void HalfToFloat(const Half* in, float* out, int64_t n);
void FloatToBFloat16(const float* in, BFloat16* out, int64_t n);
void BFloat16ToFloat(const BFloat16* in, float* out, int64_t n);

}  // namespace tessera::math::internal

#endif  // TESSERA_NDARRAY_INTERNAL_HALF_CONVERT_H_

// MXNet's 2-bit gradient compression (src/kvstore/gradient_compression-inl.h), bit for bit:
// a worker adds each gradient to its residual and sends, per value, +threshold where the
// residual reached it, -threshold where it fell to its negative, 0 elsewhere, taking what it
// sent off the residual (error feedback: nothing is lost, small updates are delayed). Two
// bits per value, 16 values to a 32-bit word: value i of a word is in its byte i / 4, bits
// 11 (+) or 10 (-) from the high end (MXNet's posbits 0xc0 0x30 0x0c 0x03, negbits 0x80 0x20
// 0x08 0x02); 00 is 0. The server turns them back into floats and sums them as pushes.
#ifndef TESSERA_KVSTORE_INTERNAL_TWO_BIT_H_
#define TESSERA_KVSTORE_INTERNAL_TWO_BIT_H_

#include <cstdint>
#include <string>

namespace tessera::kvstore::internal {

// The bytes of `n` values compressed: 4 per 16 values, rounded up.
inline uint64_t TwoBitBytes(int64_t n) { return static_cast<uint64_t>((n + 15) / 16) * 4; }

// residual[i] += grad[i], then each value quantized into `out` (TwoBitBytes(n) bytes) and
// taken off the residual.
void QuantizeTwoBit(const float* grad, float* residual, int64_t n, float threshold, char* out);

// The `n` values `in` (TwoBitBytes(n) bytes) holds.
void DequantizeTwoBit(const char* in, int64_t n, float threshold, float* out);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_TWO_BIT_H_

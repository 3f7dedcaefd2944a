// Philox4x32-10: the counter-based random number generator of Salmon et al., "Parallel
// Random Numbers: As Easy as 1, 2, 3" (SC'11), as specified by the Random123 library.
//
// A counter-based generator is a pure function block = Philox(counter, key): any position
// of any stream can be computed directly, without stepping through the ones before it.
// That is what makes one seed reproducible across devices and threads: PhiloxRandom puts
// the 64-bit seed in the key and gives every (seed, subsequence) pair its own 2^64 blocks
// of 4 outputs each (the block index in counter words 0-1, the subsequence in words 2-3),
// so streams never overlap and a kernel thread can jump to its own offset with Skip().
//
// Header-only and free of the standard library beyond <cstdint>/<cmath> on purpose: every
// function is marked TESSERA_PHILOX_HD, which becomes __host__ __device__ under nvcc, so
// CUDA kernels can take a PhiloxRandom by value and use the very same code.
//
// Thread safety: PhiloxRandom is a small value type, thread-compatible (one owner at a
// time; the resource manager guards shared generators with an engine variable).
#ifndef TESSERA_ENGINE_PHILOX_H_
#define TESSERA_ENGINE_PHILOX_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_PHILOX_HD __host__ __device__
#else
#define TESSERA_PHILOX_HD
#endif

namespace tessera::engine {

// Four 32-bit words: a counter or one block of output.
struct PhiloxBlock {
  uint32_t v[4];
  friend constexpr bool operator==(const PhiloxBlock& a, const PhiloxBlock& b) {
    return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
  }
};

struct PhiloxKey {
  uint32_t v[2];
};

namespace philox_internal {

// Multipliers and Weyl key increments from the Philox paper / Random123's philox.h.
inline constexpr uint32_t kM0 = 0xD2511F53u;
inline constexpr uint32_t kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1

TESSERA_PHILOX_HD constexpr PhiloxBlock Round(const PhiloxBlock& ctr, const PhiloxKey& key) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return PhiloxBlock{{hi1 ^ ctr.v[1] ^ key.v[0], lo1, hi0 ^ ctr.v[3] ^ key.v[1], lo0}};
}

}  // namespace philox_internal

// The bijection itself: 10 rounds, the key bumped by the Weyl constants between rounds
// (9 bumps). Matches Random123's philox4x32_R(10, ctr, key) and its kat_vectors.
TESSERA_PHILOX_HD constexpr PhiloxBlock Philox4x32x10(PhiloxBlock ctr, PhiloxKey key) {
  ctr = philox_internal::Round(ctr, key);
  for (int round = 1; round < 10; ++round) {
    key.v[0] += philox_internal::kW0;
    key.v[1] += philox_internal::kW1;
    ctr = philox_internal::Round(ctr, key);
  }
  return ctr;
}

// A stream of 32-bit outputs: Philox(counter = {block lo, block hi, subsequence lo,
// subsequence hi}, key = {seed lo, seed hi}) for block = 0, 1, 2, ..., 4 outputs per block.
// Reseeding restarts the stream; Skip() jumps ahead in O(1).
class PhiloxRandom {
 public:
  TESSERA_PHILOX_HD constexpr PhiloxRandom() { Seed(0, 0); }
  TESSERA_PHILOX_HD constexpr PhiloxRandom(uint64_t seed, uint64_t subsequence) {
    Seed(seed, subsequence);
  }

  // Restarts at position 0 of stream (seed, subsequence).
  TESSERA_PHILOX_HD constexpr void Seed(uint64_t seed, uint64_t subsequence) {
    seed_ = seed;
    subsequence_ = subsequence;
    next_block_ = 0;
    lane_ = 4;  // no block buffered: the next output generates block 0
    buffer_ = PhiloxBlock{{0, 0, 0, 0}};
  }

  TESSERA_PHILOX_HD constexpr uint64_t seed() const { return seed_; }
  TESSERA_PHILOX_HD constexpr uint64_t subsequence() const { return subsequence_; }
  // Number of 32-bit outputs drawn (or skipped) since the last Seed().
  TESSERA_PHILOX_HD constexpr uint64_t position() const {
    return next_block_ * 4 + lane_ - 4;  // unsigned wrap makes the fresh state 0
  }

  // Block `index` of this stream, independent of the current position.
  TESSERA_PHILOX_HD constexpr PhiloxBlock Block(uint64_t index) const {
    const PhiloxBlock ctr{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                           static_cast<uint32_t>(subsequence_),
                           static_cast<uint32_t>(subsequence_ >> 32)}};
    const PhiloxKey key{{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)}};
    return Philox4x32x10(ctr, key);
  }

  TESSERA_PHILOX_HD constexpr uint32_t NextU32() {
    if (lane_ == 4) {
      buffer_ = Block(next_block_++);
      lane_ = 0;
    }
    return buffer_.v[lane_++];
  }

  TESSERA_PHILOX_HD constexpr uint64_t NextU64() {
    const uint64_t hi = NextU32();
    return (hi << 32) | NextU32();
  }

  // Uniform in [0, 1): the top 24 bits scaled by 2^-24, so every value is exact in a
  // float and 1.0f is never produced (rounding a 32-bit integer to float could).
  TESSERA_PHILOX_HD constexpr float NextUniform() {
    return static_cast<float>(NextU32() >> 8) * (1.0f / 16777216.0f);
  }

  // Uniform in [0, 1) with 53 random bits.
  TESSERA_PHILOX_HD constexpr double NextUniformDouble() {
    return static_cast<double>(NextU64() >> 11) * (1.0 / 9007199254740992.0);
  }

  // Standard normal by Box-Muller (one of the pair is dropped so the stream position
  // advances by a fixed 4 outputs per call, which keeps Skip() arithmetic simple).
  TESSERA_PHILOX_HD float NextGaussian() {
    // 1 - u lies in (0, 1], so the logarithm is finite.
    const double u1 = 1.0 - NextUniformDouble();
    const double u2 = NextUniformDouble();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  // Advances by `n` 32-bit outputs, as if NextU32() had been called n times.
  TESSERA_PHILOX_HD constexpr void Skip(uint64_t n) {
    if (lane_ + n < 4) {  // stays inside the buffered block
      lane_ += static_cast<uint32_t>(n);
      return;
    }
    const uint64_t target = position() + n;
    const uint64_t block = target / 4;
    const uint32_t lane = static_cast<uint32_t>(target % 4);
    if (lane == 0) {
      next_block_ = block;
      lane_ = 4;
    } else {
      buffer_ = Block(block);
      next_block_ = block + 1;
      lane_ = lane;
    }
  }

 private:
  uint64_t seed_ = 0;
  uint64_t subsequence_ = 0;
  uint64_t next_block_ = 0;  // the block the next refill generates
  uint32_t lane_ = 4;        // next output within buffer_; 4 = buffer used up
  PhiloxBlock buffer_{{0, 0, 0, 0}};
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_PHILOX_H_

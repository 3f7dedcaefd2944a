// SamplePermutation: the order in which a shuffling iterator visits its samples in one
// epoch, a pure function of (n, seed, epoch).
//
// Why our own generator: std::shuffle and std::uniform_int_distribution are
// implementation-defined, so the same seed gives different orders on different standard
// libraries. The algorithm below is fixed, short enough to re-implement anywhere
// (tools/fetch_mnist.py does, for its train/test split), and documented here:
//
//   Mix64(z): z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB;
//             return z ^ z>>31                       (SplitMix64's finalizer, mod 2^64)
//   state = Mix64(Mix64(seed) ^ epoch)
//   Next():  state += 0x9E3779B97F4A7C15; return Mix64(state)        (SplitMix64)
//   Below(b): t = 2^64 mod b; repeat r = Next() until r >= t; return r mod b   (unbiased)
//   p = [0, 1, ..., n-1]; for i = n-1 down to 1: swap(p[i], p[Below(i + 1)])  (Fisher-Yates)
//
// Thread-safe (no state).
#ifndef TESSERA_IO_PERMUTATION_H_
#define TESSERA_IO_PERMUTATION_H_

#include <cstdint>
#include <vector>

namespace tessera::io {

std::vector<int64_t> SamplePermutation(int64_t n, uint64_t seed, uint64_t epoch);

}  // namespace tessera::io

#endif  // TESSERA_IO_PERMUTATION_H_

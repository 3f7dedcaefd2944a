#include "io/permutation.h"

#include <numeric>
#include <utility>

namespace tessera::io {
namespace {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() { return Mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, bound): rejecting the lowest 2^64 mod bound values leaves a multiple of
  // `bound` equally likely values, so `r % bound` has no modulo bias.
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<int64_t> SamplePermutation(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> p(n > 0 ? n : 0);
  std::iota(p.begin(), p.end(), int64_t{0});
  SplitMix64 rng(Mix64(Mix64(seed) ^ epoch));
  for (int64_t i = n - 1; i >= 1; --i) {
    std::swap(p[i], p[rng.Below(static_cast<uint64_t>(i) + 1)]);
  }
  return p;
}

}  // namespace tessera::io

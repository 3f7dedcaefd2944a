#include "engine/philox.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::engine {
namespace {

// The three philox4x32 10 lines of Random123's tests/kat_vectors: counter, key, expected.
struct KnownAnswer {
  PhiloxBlock counter;
  PhiloxKey key;
  PhiloxBlock expected;
};
constexpr KnownAnswer kKnownAnswers[] = {
    {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}},
     {{0x00000000, 0x00000000}},
     {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
};

// constexpr all the way down, which the CUDA build relies on too.
static_assert(Philox4x32x10(kKnownAnswers[0].counter, kKnownAnswers[0].key) ==
              kKnownAnswers[0].expected);

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& kat : kKnownAnswers) {
    const PhiloxBlock got = Philox4x32x10(kat.counter, kat.key);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got.v[i], kat.expected.v[i])
          << std::hex << "counter word0 " << kat.counter.v[0] << ", output word " << i;
    }
  }
}

TEST(PhiloxTest, StreamIsCounterBlocksOfSeedAndSubsequence) {
  // seed in the key, block index in counter words 0-1, subsequence in words 2-3.
  const uint64_t seed = 0x299f31d0a4093822ull, subsequence = 0x0370734413198a2eull;
  const PhiloxRandom rng(seed, subsequence);
  EXPECT_EQ(rng.Block(0x85a308d3243f6a88ull), kKnownAnswers[2].expected);

  PhiloxRandom zero(0, 0);
  for (uint32_t word : kKnownAnswers[0].expected.v) EXPECT_EQ(zero.NextU32(), word);
  // Block 1 follows block 0.
  const PhiloxBlock next = Philox4x32x10(PhiloxBlock{{1, 0, 0, 0}}, PhiloxKey{{0, 0}});
  for (uint32_t word : next.v) EXPECT_EQ(zero.NextU32(), word);
}

std::vector<uint32_t> Draw(PhiloxRandom rng, int n) {
  std::vector<uint32_t> out(n);
  for (uint32_t& x : out) x = rng.NextU32();
  return out;
}

TEST(PhiloxTest, SameSeedAndSubsequenceGiveTheSameSequence) {
  EXPECT_EQ(Draw(PhiloxRandom(42, 7), 1000), Draw(PhiloxRandom(42, 7), 1000));
  PhiloxRandom reseeded(1, 1);
  reseeded.NextU64();
  reseeded.Seed(42, 7);
  EXPECT_EQ(reseeded.position(), 0u);
  EXPECT_EQ(Draw(reseeded, 1000), Draw(PhiloxRandom(42, 7), 1000));
}

TEST(PhiloxTest, DifferentSubsequencesAndSeedsGiveDifferentStreams) {
  const std::vector<uint32_t> base = Draw(PhiloxRandom(42, 0), 4096);
  for (PhiloxRandom other : {PhiloxRandom(42, 1), PhiloxRandom(42, uint64_t{1} << 32),
                             PhiloxRandom(43, 0), PhiloxRandom(uint64_t{42} << 32, 0)}) {
    const std::vector<uint32_t> drawn = Draw(other, 4096);
    int equal = 0;
    for (size_t i = 0; i < base.size(); ++i) equal += base[i] == drawn[i];
    // Independent streams agree on a word with probability 2^-32 each.
    EXPECT_LE(equal, 1) << "seed " << other.seed() << " subsequence " << other.subsequence();
  }
}

TEST(PhiloxTest, SkipEqualsDrawingThatMany) {
  const std::vector<uint32_t> reference = Draw(PhiloxRandom(9, 3), 64);
  for (uint64_t start = 0; start < 6; ++start) {
    for (uint64_t n = 0; n < 40; ++n) {
      PhiloxRandom rng(9, 3);
      for (uint64_t i = 0; i < start; ++i) rng.NextU32();
      rng.Skip(n);
      EXPECT_EQ(rng.position(), start + n);
      EXPECT_EQ(rng.NextU32(), reference[start + n]) << "start " << start << " skip " << n;
    }
  }
  PhiloxRandom far(9, 3);
  far.Skip(uint64_t{1} << 40);
  EXPECT_EQ(far.NextU32(), PhiloxRandom(9, 3).Block(uint64_t{1} << 38).v[0]);
}

TEST(PhiloxTest, UniformFloatsLieInHalfOpenUnitIntervalAndAreUniform) {
  PhiloxRandom rng(2024, 0);
  constexpr int kSamples = 1 << 20;
  constexpr int kBins = 16;
  std::vector<int> histogram(kBins);
  double sum = 0;
  for (int i = 0; i < kSamples; ++i) {
    const float u = rng.NextUniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    ++histogram[static_cast<int>(u * kBins)];
  }
  // Standard error of the mean is 0.289 / sqrt(2^20) = 2.8e-4; allow about 7 of them.
  EXPECT_NEAR(sum / kSamples, 0.5, 2e-3);
  // Chi-square with 15 degrees of freedom: 37.7 is its 0.999 quantile.
  double chi2 = 0;
  const double expected = static_cast<double>(kSamples) / kBins;
  for (int count : histogram) chi2 += (count - expected) * (count - expected) / expected;
  EXPECT_LT(chi2, 37.7);

  for (int i = 0; i < 1000; ++i) {
    const double d = rng.NextUniformDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

TEST(PhiloxTest, GaussianHasZeroMeanAndUnitVariance) {
  PhiloxRandom rng(5, 5);
  constexpr int kSamples = 1 << 18;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < kSamples; ++i) {
    const double x = rng.NextGaussian();
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / kSamples;
  // Standard errors: 1/sqrt(2^18) = 2e-3 for the mean, sqrt(2)/512 = 2.8e-3 for the variance.
  EXPECT_NEAR(mean, 0.0, 1e-2);
  EXPECT_NEAR(sum_sq / kSamples - mean * mean, 1.0, 1.5e-2);
  EXPECT_EQ(rng.position(), 4u * kSamples);  // a fixed 4 outputs per Gaussian
}

}  // namespace
}  // namespace tessera::engine

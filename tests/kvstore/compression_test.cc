// Gradient compression of the pushes: MXNet's 2-bit packing bit for bit, fp16, and error
// feedback for both - what was not sent stays in the residual, so over any number of pushes
// the values sent plus the residual are the gradients' sum.
#include "kvstore/internal/compression.h"

#include "core/dtype.h"
#include "kvstore/internal/two_bit.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::kvstore::internal {
namespace {

using ::testing::ElementsAre;


TEST(TwoBitTest, PacksAsMxnetDoes) {
  // Value i of a 16-value block is in byte i / 4, its two bits from the byte's high end:
  // 11 for +threshold, 10 for -threshold.
  const std::vector<float> grad = {0.6f, -0.7f, 0.2f, 0.5f, 0, 0, 0, 0,
                                   0,    0,     0,    0,    0, 0, 0, -3};
  std::vector<float> residual(grad.size(), 0);
  std::string out(TwoBitBytes(16), 'x');
  QuantizeTwoBit(grad.data(), residual.data(), 16, 0.5f, out.data());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_THAT(std::vector<uint8_t>(out.begin(), out.end()), ElementsAre(0xc0 | 0x20 | 0x03, 0, 0, 0x02));
  EXPECT_THAT(residual, ElementsAre(::testing::FloatEq(0.1f), ::testing::FloatEq(-0.2f), 0.2f, 0, 0,
                                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -2.5f));
  std::vector<float> values(16);
  DequantizeTwoBit(out.data(), 16, 0.5f, values.data());
  EXPECT_THAT(values, ElementsAre(0.5f, -0.5f, 0, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.5f));
}

TEST(TwoBitTest, APartialLastBlockTakesAWholeWord) {
  EXPECT_EQ(TwoBitBytes(1), 4u);
  EXPECT_EQ(TwoBitBytes(16), 4u);
  EXPECT_EQ(TwoBitBytes(17), 8u);
  const std::vector<float> grad(17, 1.0f);
  std::vector<float> residual(17, 0), values(17);
  std::string out(TwoBitBytes(17), '\0');
  QuantizeTwoBit(grad.data(), residual.data(), 17, 0.25f, out.data());
  DequantizeTwoBit(out.data(), 17, 0.25f, values.data());
  EXPECT_EQ(values, std::vector<float>(17, 0.25f));
  EXPECT_EQ(static_cast<uint8_t>(out[4]), 0xc0);  // value 16 alone in the second word
  EXPECT_EQ(out.substr(5), std::string(3, '\0'));
}

// MXNet's loop (src/kvstore/gradient_compression-inl.h), one value at a time, for the
// vectorized one to be held to bit for bit.
void MxnetQuantize(const float* grad, float* residual, int64_t n, float threshold, uint8_t* out) {
  constexpr uint8_t kPositive[] = {0xc0, 0x30, 0x0c, 0x03};
  constexpr uint8_t kNegative[] = {0x80, 0x20, 0x08, 0x02};
  std::fill(out, out + TwoBitBytes(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    residual[i] += grad[i];
    if (residual[i] >= threshold) {
      out[i >> 2] |= kPositive[i & 3];
      residual[i] -= threshold;
    } else if (residual[i] <= -threshold) {
      out[i >> 2] |= kNegative[i & 3];
      residual[i] += threshold;
    }
  }
}

TEST(TwoBitTest, EqualsMxnetsLoopBitForBit) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0, 0.6f);
  for (const int64_t n : {0, 1, 15, 16, 17, 33, 1000, 4099}) {
    for (const float threshold : {0.5f, 0.05f}) {
      SCOPED_TRACE(::testing::Message() << n << " values, threshold " << threshold);
      std::vector<float> grad(n), residual(n), want_residual;
      for (int64_t i = 0; i < n; ++i) {
        grad[i] = normal(rng);
        residual[i] = normal(rng);
      }
      if (n > 5) {  // the edges: exactly at the thresholds, a NaN, the infinities, -0
        residual[0] = 0, grad[0] = threshold;
        residual[1] = 0, grad[1] = -threshold;
        grad[2] = std::numeric_limits<float>::quiet_NaN();
        grad[3] = std::numeric_limits<float>::infinity();
        grad[4] = -std::numeric_limits<float>::infinity();
        residual[5] = -0.0f, grad[5] = -0.0f;
      }
      want_residual = residual;
      std::string got(TwoBitBytes(n), 'x');
      std::vector<uint8_t> want(TwoBitBytes(n));
      for (int step = 0; step < 3; ++step) {
        QuantizeTwoBit(grad.data(), residual.data(), n, threshold, got.data());
        MxnetQuantize(grad.data(), want_residual.data(), n, threshold, want.data());
        ASSERT_EQ(std::vector<uint8_t>(got.begin(), got.end()), want) << "step " << step;
        ASSERT_EQ(std::memcmp(residual.data(), want_residual.data(), n * sizeof(float)), 0) << "step " << step;
      }
      std::vector<float> values(n);
      DequantizeTwoBit(got.data(), n, threshold, values.data());
      for (int64_t i = 0; i < n; ++i) {
        const int code = (want[i >> 2] >> (6 - 2 * (i & 3))) & 3;
        ASSERT_EQ(values[i], code == 3 ? threshold : code == 2 ? -threshold : 0.0f) << i;
      }
    }
  }
}

TEST(TwoBitTest, ErrorFeedbackLosesNothing) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 0.3f);
  constexpr int kN = 1000;
  constexpr float kThreshold = 0.5f;
  std::vector<float> residual(kN, 0), sent(kN, 0), total(kN, 0), grad(kN), values(kN);
  std::string out(TwoBitBytes(kN), '\0');
  for (int step = 0; step < 50; ++step) {
    for (int i = 0; i < kN; ++i) {
      grad[i] = normal(rng);
      total[i] += grad[i];
    }
    QuantizeTwoBit(grad.data(), residual.data(), kN, kThreshold, out.data());
    DequantizeTwoBit(out.data(), kN, kThreshold, values.data());
    for (int i = 0; i < kN; ++i) {
      ASSERT_TRUE(values[i] == 0 || values[i] == kThreshold || values[i] == -kThreshold);
      sent[i] += values[i];
      // Only what no push reached the threshold of is held back.
      ASSERT_LT(residual[i], kThreshold + 1.5f) << i;
    }
  }
  for (int i = 0; i < kN; ++i) EXPECT_NEAR(sent[i] + residual[i], total[i], 1e-4) << i;
}

GradientCompression Type(const std::string& type, float threshold = 0) {
  GradientCompression c;
  c.set_type(type);
  c.set_threshold(threshold);
  return c;
}

TEST(PushCompressionTest, Fp16CarriesHalfsAndKeepsTheRounding) {
  const GradientCompression fp16 = Type("fp16");
  std::vector<float> grad = {1.0f, 0.1f, -3.14159f, 1e-8f, 65504.0f};
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 10);
  while (grad.size() < 2500) grad.push_back(normal(rng));  // past the conversions' blocks
  const int64_t n = static_cast<int64_t>(grad.size());
  std::vector<float> residual(grad.size(), 0), values(grad.size());
  std::string out(CompressedBytes(fp16, n), '\0');
  ASSERT_EQ(out.size(), 5000u);
  CompressPush(fp16, grad.data(), residual.data(), n, out.data());
  DecompressPush(fp16, out.data(), n, values.data());
  for (size_t i = 0; i < grad.size(); ++i) {
    EXPECT_EQ(values[i], static_cast<float>(Half(grad[i]))) << i;
    EXPECT_EQ(values[i] + residual[i], grad[i]) << i;  // the rounding stays behind, exactly
  }
}

TEST(PushCompressionTest, ErrorFeedbackLosesNothingInEitherType) {
  for (const GradientCompression& c : {Type("2bit", 0.05f), Type("fp16")}) {
    SCOPED_TRACE(c.type());
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0, 0.02f);
    constexpr int kN = 333;
    std::vector<float> residual(kN, 0), grad(kN), values(kN);
    std::vector<double> sent(kN, 0), total(kN, 0);
    std::string out(CompressedBytes(c, kN), '\0');
    for (int step = 0; step < 40; ++step) {
      for (int i = 0; i < kN; ++i) total[i] += grad[i] = normal(rng);
      CompressPush(c, grad.data(), residual.data(), kN, out.data());
      DecompressPush(c, out.data(), kN, values.data());
      for (int i = 0; i < kN; ++i) sent[i] += values[i];
    }
    for (int i = 0; i < kN; ++i) EXPECT_NEAR(sent[i] + residual[i], total[i], 1e-5) << i;
  }
}

// The pulls in bfloat16: exactly BFloat16's rounding (to nearest even; NaN stays NaN,
// infinities and float32's range kept), packed two bytes a value, over the conversions'
// blocks; RoundPull gives what PackPull then UnpackPull give.
TEST(PullCompressionTest, BFloat16RoundsToNearestEvenAndKeepsFloat32sRange) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 100);
  std::vector<float> values(2500);
  for (float& v : values) v = normal(rng);
  values[0] = 1.0f + 1.0f / 256;                // a tie: to the even 1.0
  values[1] = 1.0f + 3.0f / 256;                // a tie: to the even 1 + 4/256
  values[2] = 3.0e38f;                          // beyond float16, within bfloat16
  values[3] = std::numeric_limits<float>::infinity();
  values[4] = std::numeric_limits<float>::quiet_NaN();
  values[5] = -0.0f;
  std::string packed(values.size() * 2, '\0');
  PackPull(values.data(), static_cast<int64_t>(values.size()), packed.data());
  std::vector<float> unpacked(values.size()), rounded(values.size());
  UnpackPull(packed.data(), static_cast<int64_t>(values.size()), unpacked.data());
  RoundPull(values.data(), static_cast<int64_t>(values.size()), rounded.data());
  EXPECT_EQ(unpacked[0], 1.0f);
  EXPECT_EQ(unpacked[1], 1.0f + 4.0f / 256);
  EXPECT_NEAR(unpacked[2], 3.0e38f, 3.0e38f / 256);
  EXPECT_EQ(unpacked[3], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(unpacked[4]) && std::isnan(rounded[4]));
  EXPECT_TRUE(std::signbit(unpacked[5]));
  for (size_t i = 0; i < values.size(); ++i) {
    if (i == 4) continue;
    const BFloat16 want(values[i]);
    uint16_t bits;
    std::memcpy(&bits, packed.data() + 2 * i, 2);
    ASSERT_EQ(bits, want.bits) << i;
    ASSERT_EQ(unpacked[i], static_cast<float>(want)) << i;
    ASSERT_EQ(rounded[i], unpacked[i]) << i;
  }
  RoundPull(values.data(), static_cast<int64_t>(values.size()), values.data());  // in place
  EXPECT_EQ(values[100], unpacked[100]);
}

TEST(PushCompressionTest, OnlyKnownTypesWithTheirParameters) {
  EXPECT_TRUE(CheckCompression(Type("2bit", 0.5f)).ok());
  EXPECT_TRUE(CheckCompression(Type("fp16")).ok());
  EXPECT_THAT(CheckCompression(Type("1bit")).message(),
              ::testing::HasSubstr("'1bit' is not a compression (known: 2bit, fp16)"));
  EXPECT_THAT(CheckCompression(Type("2bit", -1)).message(),
              ::testing::HasSubstr("threshold -1 must be a positive number"));
  EXPECT_THAT(CheckCompression(Type("fp16", 0.5f)).message(),
              ::testing::HasSubstr("fp16 compression takes no threshold"));
  std::string field;
  EXPECT_THAT(CheckCompression(Type("", 0.5f), &field).message(),
              ::testing::HasSubstr("a threshold needs a type"));
  EXPECT_EQ(field, "type");
  EXPECT_TRUE(CheckCompression(GradientCompression()).ok());  // none
  GradientCompression pulls = Type("2bit", 0.5f);
  pulls.set_pull_type("bf16");
  EXPECT_TRUE(CheckCompression(pulls).ok());
  EXPECT_EQ(DescribeCompression(pulls), "2bit (threshold 0.5) with bf16 pulls");
  pulls.set_pull_type("fp16");
  EXPECT_THAT(CheckCompression(pulls, &field).message(),
              ::testing::HasSubstr("'fp16' is not a compression of the pulls (known: bf16)"));
  EXPECT_EQ(field, "pull_type");
  EXPECT_EQ(DescribeCompression(GradientCompression()), "uncompressed");
}

}  // namespace
}  // namespace tessera::kvstore::internal

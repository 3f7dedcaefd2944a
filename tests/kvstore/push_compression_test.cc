// Gradient compression of the pushes: MXNet's 2-bit packing bit for bit, fp16, and error
// feedback for both - what was not sent stays in the residual, so over any number of pushes
// the values sent plus the residual are the gradients' sum.
#include "kvstore/internal/push_compression.h"

#include "core/dtype.h"
#include "kvstore/internal/two_bit.h"

#include <cstdint>
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
  const std::vector<float> grad = {1.0f, 0.1f, -3.14159f, 1e-8f, 65504.0f};
  std::vector<float> residual(grad.size(), 0), values(grad.size());
  std::string out(CompressedBytes(fp16, 5), '\0');
  ASSERT_EQ(out.size(), 10u);
  CompressPush(fp16, grad.data(), residual.data(), 5, out.data());
  DecompressPush(fp16, out.data(), 5, values.data());
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

TEST(PushCompressionTest, OnlyKnownTypesWithTheirParameters) {
  EXPECT_TRUE(CheckCompression(Type("2bit", 0.5f)).ok());
  EXPECT_TRUE(CheckCompression(Type("fp16")).ok());
  EXPECT_THAT(CheckCompression(Type("1bit")).message(),
              ::testing::HasSubstr("'1bit' is not a compression (known: 2bit, fp16)"));
  EXPECT_THAT(CheckCompression(Type("2bit", -1)).message(),
              ::testing::HasSubstr("threshold -1 must be a positive number"));
  EXPECT_THAT(CheckCompression(Type("fp16", 0.5f)).message(),
              ::testing::HasSubstr("fp16 compression takes no threshold"));
}

}  // namespace
}  // namespace tessera::kvstore::internal

// Initializers: name conventions, distributions' ranges, reproducibility from the seed,
// Mixed patterns and errors.
#include "train/initializer.h"

#include <cmath>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/arithmetic.h"
#include "tests/ndarray/test_util.h"

namespace tessera::train {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;

class InitializerTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }
  const Runtime& rt() { return owned_->get(); }
  std::vector<float> Init(const Initializer& init, const std::string& name, const Shape& shape) {
    auto a = Zeros(rt(), shape);
    TESSERA_CHECK(a.ok());
    EXPECT_THAT(init(name, *a), IsOk());
    auto v = a->AsVector<float>();
    TESSERA_CHECK(v.ok());
    return *v;
  }
  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(InitializerTest, NameConventionsComeFirst) {
  const Xavier xavier;
  EXPECT_THAT(Init(xavier, "fc1_bias", {4}), Each(0.0f));
  EXPECT_THAT(Init(xavier, "bn_gamma", {4}), Each(1.0f));
  EXPECT_THAT(Init(xavier, "bn_beta", {4}), Each(0.0f));
  EXPECT_THAT(Init(xavier, "bn_moving_mean", {4}), Each(0.0f));
  EXPECT_THAT(Init(xavier, "bn_moving_var", {4}), Each(1.0f));
}

TEST_F(InitializerTest, XavierScaleAndReproducibility) {
  // (50, 20, 5, 5): fan_in 500, fan_out 1250, scale sqrt(3 / 875).
  const double scale = std::sqrt(3.0 / 875);
  ASSERT_THAT(rt().resources->SeedRandom(4), IsOk());
  const std::vector<float> a = Init(Xavier(), "conv2_weight", {50, 20, 5, 5});
  double max_abs = 0;
  for (float v : a) max_abs = std::max(max_abs, std::abs(static_cast<double>(v)));
  EXPECT_LE(max_abs, scale);
  EXPECT_GT(max_abs, 0.9 * scale);
  ASSERT_THAT(rt().resources->SeedRandom(4), IsOk());
  EXPECT_EQ(Init(Xavier(), "conv2_weight", {50, 20, 5, 5}), a);
  EXPECT_THAT(Init(Constant(0.5), "w", {3}), Each(0.5f));
  for (float v : Init(Uniform(0.1), "w", {1000})) ASSERT_LE(std::abs(v), 0.1f);
}

TEST_F(InitializerTest, MixedPicksTheFirstMatchingPattern) {
  auto mixed = Mixed::Create({{"fc1_.*", std::make_shared<Constant>(2.0)}, {".*", std::make_shared<Constant>(3.0)}});
  ASSERT_THAT(mixed.status(), IsOk());
  EXPECT_THAT(Init(**mixed, "fc1_weight", {2, 2}), Each(2.0f));
  EXPECT_THAT(Init(**mixed, "fc2_weight", {2, 2}), Each(3.0f));
  auto narrow = Mixed::Create({{"conv.*", std::make_shared<Constant>(1.0)}});
  ASSERT_THAT(narrow.status(), IsOk());
  auto a = Zeros(rt(), {2, 2});
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_THAT((**narrow)("fc_weight", *a), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fc_weight'")));
  EXPECT_THAT(Mixed::Create({{"(", std::make_shared<Constant>(1.0)}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'('")));
  EXPECT_THAT(Xavier()("w", *Zeros(rt(), {4})), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w'")));
}

}  // namespace
}  // namespace tessera::train

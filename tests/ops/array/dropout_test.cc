// Dropout: identity at inference, statistics of the kept fraction and scaling while
// training, backward consistent with the forward's mask, reproducibility from the seed.
#include <cmath>
#include <memory>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/array/array_test_util.h"

namespace tessera::ops::testing {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<Values> Identity(const std::vector<Values>& in, const std::vector<Shape>&) {
  return {in[0]};
}

TEST(DropoutTest, InferenceIsIdentity) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kFloat16}) {
    auto c = MakeChecker("Dropout", {{"p", "0.5"}}, {{4, 5}}, dtype);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->prop().NumVisibleOutputs(), 1);
    // The half type rounds the inputs on the way in: ~3 decimal digits.
    const Tolerance tol = dtype == DType::kFloat16 ? Tolerance{1e-3, 1e-3} : Tolerance{};
    c->CheckForward(Identity, tol, /*is_train=*/false);
  }
}

TEST(DropoutTest, ZeroProbabilityIsIdentityWhileTraining) {
  auto c = MakeChecker("Dropout", {{"p", "0"}}, {{3, 7}});
  ASSERT_NE(c, nullptr);
  c->CheckForward(Identity, {}, /*is_train=*/true);
  c->CheckBackward();
}

// Fraction of zeros ~ p (10000 draws: the standard deviation is ~0.005), kept values x/(1-p).
void ExpectDropped(const Values& x, const Values& y, double p) {
  int64_t dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) {
      ++dropped;
    } else {
      EXPECT_NEAR(y[i], x[i] / (1 - p), 1e-6 * std::abs(x[i])) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / y.size(), p, 0.025);
}

TEST(DropoutTest, TrainingDropsAFractionPAndScales) {
  for (double p : {0.3, 0.5, 0.8}) {
    auto c = MakeChecker("Dropout", {{"p", absl::StrCat(p)}}, {{100, 100}}, DType::kFloat32);
    ASSERT_NE(c, nullptr);
    auto out = c->Forward(/*is_train=*/true);
    ASSERT_THAT(out, IsOk());
    ExpectDropped(c->input(0), out->at(0), p);
  }
}

TEST(DropoutTest, ModeAlwaysDropsAtInference) {
  auto c = MakeChecker("Dropout", {{"p", "0.4"}, {"mode", "always"}}, {{100, 100}});
  ASSERT_NE(c, nullptr);
  auto out = c->Forward(/*is_train=*/false);
  ASSERT_THAT(out, IsOk());
  ExpectDropped(c->input(0), out->at(0), 0.4);
}

TEST(DropoutTest, SameSeedReproducesDifferentSeedDiffers) {
  auto a = MakeChecker("Dropout", {{"p", "0.5"}}, {{64, 64}}, DType::kFloat32, /*seed=*/7);
  auto b = MakeChecker("Dropout", {{"p", "0.5"}}, {{64, 64}}, DType::kFloat32, /*seed=*/7);
  auto d = MakeChecker("Dropout", {{"p", "0.5"}}, {{64, 64}}, DType::kFloat32, /*seed=*/8);
  ASSERT_TRUE(a && b && d);
  auto ya = a->Forward(), yb = b->Forward(), yd = d->Forward();
  ASSERT_TRUE(ya.ok() && yb.ok() && yd.ok());
  EXPECT_EQ(ya->at(0), yb->at(0));
  // Different seeds also draw different inputs, so compare the drop patterns.
  int64_t same = 0;
  for (size_t i = 0; i < ya->at(0).size(); ++i) same += (ya->at(0)[i] == 0) == (yd->at(0)[i] == 0);
  EXPECT_LT(same, static_cast<int64_t>(ya->at(0).size() * 0.6));
}

TEST(DropoutTest, BackwardAppliesTheForwardMask) {
  const double p = 0.3;
  // Two checkers with one seed draw the same inputs and the same first mask: `a`'s forward
  // shows which elements Backward of `b` (which runs its own forward first) dropped.
  auto a = MakeChecker("Dropout", {{"p", "0.3"}}, {{50, 40}}, DType::kFloat64, 11);
  auto b = MakeChecker("Dropout", {{"p", "0.3"}}, {{50, 40}}, DType::kFloat64, 11);
  ASSERT_TRUE(a && b);
  auto y = a->Forward();
  ASSERT_THAT(y, IsOk());
  std::mt19937_64 rng(3);
  const Values og = RandomValues(2000, rng);
  auto g = b->Backward({og});
  ASSERT_THAT(g, IsOk());
  int64_t kept = 0;
  for (size_t i = 0; i < og.size(); ++i) {
    const double mask = y->at(0)[i] != 0 ? 1 : 0;
    kept += mask != 0;
    EXPECT_NEAR(g->at(0)[i], og[i] * mask / (1 - p), 1e-12) << i;
  }
  EXPECT_NEAR(kept / 2000.0, 1 - p, 0.04);
}

TEST(DropoutTest, ShapesAndDependencies) {
  std::vector<Shape> in = {{3, 4}}, out;
  auto known = InferShapes("Dropout", {}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], (Shape{3, 4}));
  EXPECT_EQ(out[1], (Shape{3, 4}));  // the mask
  auto prop = OpRegistry::Global().Create("Dropout", {});
  ASSERT_THAT(prop, IsOk());
  // out_grad (id 0) and the mask (output 1: id 1 + 1 + 1 = 3); not the data.
  EXPECT_EQ((*prop)->DeclareBackwardDependency({0}, {1}, {2, 3}), (std::vector<int>{0, 3}));
  EXPECT_EQ((*prop)->ForwardResource({{3, 4}}).size(), 1u);
}

TEST(DropoutTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("Dropout", {{"p", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'p'")));
  EXPECT_THAT(OpRegistry::Global().Create("Dropout", {{"p", "-0.1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'p'")));
  EXPECT_THAT(OpRegistry::Global().Create("Dropout", {{"mode", "sometimes"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mode")));
}

}  // namespace
}  // namespace tessera::ops::testing

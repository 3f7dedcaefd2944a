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
using ::testing::AllOf;
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

// axes=(1,) on (N, T, C): each (n, c) is kept or dropped at every t alike.
TEST(DropoutTest, AxesShareOneDecisionAlongThem) {
  for (const char* axes : {"(1,)", "(-2,)"}) {
    auto c = MakeChecker("Dropout", {{"p", "0.5"}, {"axes", axes}}, {{40, 6, 50}},
                         DType::kFloat64);
    ASSERT_NE(c, nullptr);
    auto out = c->Forward(/*is_train=*/true);
    ASSERT_THAT(out, IsOk());
    const Values& x = c->input(0);
    const Values& y = out->at(0);
    int64_t dropped = 0;
    for (int64_t n = 0; n < 40; ++n) {
      for (int64_t ch = 0; ch < 50; ++ch) {
        const bool kept = y[(n * 6) * 50 + ch] != 0;
        dropped += !kept;
        for (int64_t t = 0; t < 6; ++t) {
          const int64_t i = (n * 6 + t) * 50 + ch;
          EXPECT_EQ(y[i], kept ? x[i] * 2 : 0.0) << "n " << n << " t " << t << " c " << ch;
        }
      }
    }
    // 2000 independent decisions: the standard deviation of the fraction is ~0.011.
    EXPECT_NEAR(dropped / 2000.0, 0.5, 0.05);
    // Backward applies its forward's (shared) mask: 2 or 0 per (n, c), alike along t.
    auto grads = c->Backward({Values(x.size(), 1.0)});
    ASSERT_THAT(grads, IsOk());
    for (int64_t n = 0; n < 40; ++n) {
      for (int64_t ch = 0; ch < 50; ++ch) {
        const double g = (*grads)[0][(n * 6) * 50 + ch];
        EXPECT_TRUE(g == 0 || g == 2) << g;
        for (int64_t t = 1; t < 6; ++t) EXPECT_EQ((*grads)[0][(n * 6 + t) * 50 + ch], g);
      }
    }
  }
  // Two shared axes: one decision per (n,) row of (N, T, C) with axes (1, 2).
  auto c = MakeChecker("Dropout", {{"p", "0.5"}, {"axes", "(1,2)"}}, {{30, 3, 4}}, DType::kFloat64);
  ASSERT_NE(c, nullptr);
  auto out = c->Forward(/*is_train=*/true);
  ASSERT_THAT(out, IsOk());
  for (int64_t n = 0; n < 30; ++n) {
    const bool kept = out->at(0)[n * 12] != 0;
    for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(out->at(0)[n * 12 + k] != 0, kept) << n;
  }
}

TEST(DropoutTest, BadParameters) {
  EXPECT_THAT(OpRegistry::Global().Create("Dropout", {{"p", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'p'")));
  EXPECT_THAT(OpRegistry::Global().Create("Dropout", {{"p", "-0.1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'p'")));
  EXPECT_THAT(OpRegistry::Global().Create("Dropout", {{"mode", "sometimes"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mode")));
  auto prop = OpRegistry::Global().Create("Dropout", {{"axes", "(3,)"}, {"cudnn_off", "True"}});
  ASSERT_THAT(prop, IsOk());
  std::vector<Shape> in{Shape{2, 3, 4}}, out(2), aux;
  EXPECT_THAT((*prop)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("axes"), HasSubstr("(2,3,4)"))));
}

}  // namespace
}  // namespace tessera::ops::testing

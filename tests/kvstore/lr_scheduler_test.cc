// Learning-rate schedulers against rates worked out by hand from MXNet's definitions, with
// warm-up, resumed runs, state save/restore and every argument check.
#include "kvstore/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<double> Rates(LRScheduler& s, int from, int to) {
  std::vector<double> out;
  for (int n = from; n <= to; ++n) out.push_back(s(n));
  return out;
}

// Halved after every 3 updates, floored at 0.1: updates 1-3 at 1, 4-6 at 0.5, ...
TEST(FactorSchedulerTest, DecaysEveryStepDownToTheFloor) {
  auto s =
      *FactorScheduler::Create(/*step=*/3, /*factor=*/0.5, /*stop_factor_lr=*/0.1, /*base_lr=*/1);
  EXPECT_THAT(Rates(*s, 1, 14),
              ElementsAre(1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.1, 0.1));
  // A resumed run jumps straight to update 10: the loop catches up.
  auto jump = *FactorScheduler::Create(3, 0.5, 0.1, 1);
  EXPECT_EQ((*jump)(10), 0.125);
}

TEST(FactorSchedulerTest, LinearAndConstantWarmup) {
  auto linear = *FactorScheduler::Create(2, 0.5, 1e-8, 1, Warmup{2, 0.5, WarmupMode::kLinear});
  EXPECT_THAT(Rates(*linear, 0, 3), ElementsAre(0.5, 0.75, 1, 0.5));
  auto constant = *FactorScheduler::Create(2, 0.5, 1e-8, 1, Warmup{2, 0.5, WarmupMode::kConstant});
  EXPECT_THAT(Rates(*constant, 0, 3), ElementsAre(0.5, 0.5, 1, 0.5));
}

// Multiplied by 0.1 once update 2 and again once update 5 is past.
TEST(MultiFactorSchedulerTest, DecaysAfterEachListedStep) {
  auto s = *MultiFactorScheduler::Create({2, 5}, 0.1, 1);
  const std::vector<double> rates = Rates(*s, 1, 7);
  EXPECT_THAT(
      rates, ElementsAre(1, 1, DoubleNear(0.1, 1e-15), DoubleNear(0.1, 1e-15),
                         DoubleNear(0.1, 1e-15), DoubleNear(0.01, 1e-15), DoubleNear(0.01, 1e-15)));
}

// lr = 0.1 + 0.9 (1 + cos(pi n / 10)) / 2, then 0.1 after update 10.
TEST(CosineSchedulerTest, FollowsHalfACosine) {
  auto s = *CosineScheduler::Create(10, /*base_lr=*/1, /*final_lr=*/0.1);
  std::vector<::testing::Matcher<double>> expected;
  for (int n = 0; n <= 12; ++n) {
    const double c = n <= 10 ? 0.1 + 0.9 * (1 + std::cos(std::numbers::pi * n / 10)) / 2 : 0.1;
    expected.push_back(DoubleNear(c, 1e-15));
  }
  EXPECT_THAT(Rates(*s, 0, 12), ElementsAreArray(expected));
  EXPECT_NEAR((*s)(5), 0.55, 1e-15);
}

// Warm-up 0.2 -> 1 over 4 updates, then the cosine over the remaining 6 down to 0.
TEST(CosineSchedulerTest, WarmupThenCosine) {
  auto s = *CosineScheduler::Create(10, 1, 0, /*warmup_steps=*/4, /*warmup_begin_lr=*/0.2);
  EXPECT_THAT(Rates(*s, 0, 4), ElementsAre(DoubleNear(0.2, 1e-15), DoubleNear(0.4, 1e-15),
                                           DoubleNear(0.6, 1e-15), DoubleNear(0.8, 1e-15), 1));
  EXPECT_NEAR((*s)(7), 0.5, 1e-15);
  EXPECT_NEAR((*s)(10), 0, 1e-15);
  // Past max_update even when no update landed on it (MXNet would keep the rate of 7).
  auto skipping = *CosineScheduler::Create(10, 1, 0.05);
  (*skipping)(7);
  EXPECT_EQ((*skipping)(12), 0.05);
}

TEST(LRSchedulerTest, SetBaseLrMovesTheWholeSchedule) {
  auto cosine = *CosineScheduler::Create(10, 1, 0, 2, 0.5);
  cosine->SetBaseLr(2);
  EXPECT_DOUBLE_EQ((*cosine)(1), 1.25);  // warm-up towards the new rate
  EXPECT_DOUBLE_EQ((*cosine)(2), 2);
  EXPECT_DOUBLE_EQ(cosine->base_lr(), 2);
}

TEST(LRSchedulerTest, SavedStateResumesExactly) {
  auto a = *FactorScheduler::Create(3, 0.7, 1e-3, 1);
  auto b = *MultiFactorScheduler::Create({2, 4, 8}, 0.3, 2);
  auto c = *CosineScheduler::Create(6, 1, 0.2);
  for (LRScheduler* s : std::vector<LRScheduler*>{a.get(), b.get(), c.get()}) {
    SCOPED_TRACE(s->name());
    (void)Rates(*s, 1, 7);
  }
  auto a2 = *FactorScheduler::Create(3, 0.7, 1e-3, 1);
  auto b2 = *MultiFactorScheduler::Create({2, 4, 8}, 0.3, 2);
  auto c2 = *CosineScheduler::Create(6, 1, 0.2);
  ASSERT_THAT(a2->LoadState(a->SaveState()), IsOk());
  ASSERT_THAT(b2->LoadState(b->SaveState()), IsOk());
  ASSERT_THAT(c2->LoadState(c->SaveState()), IsOk());
  EXPECT_EQ(Rates(*a2, 8, 20), Rates(*a, 8, 20));
  EXPECT_EQ(Rates(*b2, 8, 20), Rates(*b, 8, 20));
  EXPECT_EQ(Rates(*c2, 8, 20), Rates(*c, 8, 20));
  EXPECT_THAT(a2->LoadState({1.0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 3")));
  EXPECT_THAT(b2->LoadState({1.0, 1.0, 9.0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")));
}

TEST(LRSchedulerTest, BadArgumentsNameSchedulerAndArgument) {
  using absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(FactorScheduler::Create(0),
              StatusIs(kInvalidArgument, AllOf(HasSubstr("FactorScheduler"), HasSubstr("step"))));
  EXPECT_THAT(FactorScheduler::Create(1, 1.5), StatusIs(kInvalidArgument, HasSubstr("factor")));
  EXPECT_THAT(FactorScheduler::Create(1, 0), StatusIs(kInvalidArgument, HasSubstr("factor")));
  EXPECT_THAT(FactorScheduler::Create(1, 0.5, -1),
              StatusIs(kInvalidArgument, HasSubstr("stop_factor_lr")));
  EXPECT_THAT(FactorScheduler::Create(1, 0.5, 0, -0.1),
              StatusIs(kInvalidArgument, HasSubstr("base_lr")));
  EXPECT_THAT(FactorScheduler::Create(1, 0.5, 0, 0.1, Warmup{1, 0.2}),
              StatusIs(kInvalidArgument, HasSubstr("warmup_begin_lr")));
  EXPECT_THAT(FactorScheduler::Create(1, 0.5, 0, 0.1, Warmup{-1, 0}),
              StatusIs(kInvalidArgument, HasSubstr("warmup_steps")));
  EXPECT_THAT(
      MultiFactorScheduler::Create({}),
      StatusIs(kInvalidArgument, AllOf(HasSubstr("MultiFactorScheduler"), HasSubstr("steps"))));
  EXPECT_THAT(MultiFactorScheduler::Create({3, 3}),
              StatusIs(kInvalidArgument, HasSubstr("[3, 3]")));
  EXPECT_THAT(MultiFactorScheduler::Create({0, 3}), StatusIs(kInvalidArgument, HasSubstr("steps")));
  EXPECT_THAT(
      CosineScheduler::Create(0),
      StatusIs(kInvalidArgument, AllOf(HasSubstr("CosineScheduler"), HasSubstr("max_update"))));
  EXPECT_THAT(CosineScheduler::Create(5, 1, 0, 5),
              StatusIs(kInvalidArgument, HasSubstr("warmup_steps")));
  EXPECT_THAT(CosineScheduler::Create(5, 1, -1), StatusIs(kInvalidArgument, HasSubstr("final_lr")));
}

// What lets a parameter server run the trainer's schedule: name() and config() re-create a
// scheduler that yields the same rate at every update, bit for bit.
TEST(CreateLRSchedulerTest, ConfigRecreatesTheSameSchedule) {
  std::vector<std::unique_ptr<LRScheduler>> originals;
  originals.push_back(*FactorScheduler::Create(7, 0.9, 1e-4, 0.3, {5, 0.01, WarmupMode::kLinear}));
  originals.push_back(*MultiFactorScheduler::Create({10, 25, 60}, 0.5, 0.1, {3, 0.02, WarmupMode::kConstant}));
  originals.push_back(*CosineScheduler::Create(100, 0.7, 0.001, 10, 0.1));
  for (auto& original : originals) {
    auto copy = CreateLRScheduler(original->name(), original->config());
    ASSERT_THAT(copy, IsOk()) << original->name();
    for (int64_t n = 1; n <= 150; ++n) ASSERT_EQ((**copy)(n), (*original)(n)) << original->name() << " at " << n;
  }
}

TEST(CreateLRSchedulerTest, BadNamesAndArgumentsAreNamed) {
  EXPECT_THAT(CreateLRScheduler("poly", {}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"poly\"")));
  EXPECT_THAT(CreateLRScheduler("factor", {{"step", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step='x'")));
  EXPECT_THAT(CreateLRScheduler("factor", {{"step", "3"}, {"speed", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'speed'")));
  EXPECT_THAT(CreateLRScheduler("multifactor", {{"steps", "5,a"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a'")));
  EXPECT_THAT(CreateLRScheduler("cosine", {{"max_update", "10"}, {"warmup_mode", "cubic"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("warmup_mode='cubic'")));
}

}  // namespace
}  // namespace tessera::kvstore

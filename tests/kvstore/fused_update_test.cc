// FusedUpdate against its oracle, Optimizer::Update of each parameter in turn: two optimizers
// made alike train the same weights with the same gradients, one parameter at a time and
// fused, and must hold the same bits - weights and the whole saved optimizer state (states,
// counts, the scheduler's state) - after every run: every optimizer and variant, lr_mult and
// wd_mult groups, schedules, rows computed ahead across several windows, and changes made
// between steps (the rate, the multipliers, loaded state). On the CPU everywhere; on gpu(0)
// (skipped without one) also with the step captured as a CUDA graph, for 1,000 steps across
// a schedule's boundaries, against the uncaptured fused run and the per-parameter one.
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/engine.h"
#include "kvstore/fused_update.h"
#include "kvstore/internal/loss_scaler.h"
#include "kvstore/lr_scheduler.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "tests/gpu_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Config {
  std::string name;
  std::string optimizer;
  ops::KwArgs params;
};

std::vector<Config> Configs() {
  return {
      {"sgd", "sgd", {{"learning_rate", "0.1"}, {"wd", "0.01"}}},
      {"sgd_mom", "sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.001"}}},
      {"sgd_mom_clip", "sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"clip_gradient", "0.05"}}},
      {"adam", "adam", {{"learning_rate", "0.01"}, {"wd", "0.001"}}},
      {"adam_clip", "adam", {{"learning_rate", "0.01"}, {"clip_gradient", "0.1"}, {"rescale_grad", "0.5"}}},
      {"rmsprop", "rmsprop", {{"learning_rate", "0.01"}, {"wd", "0.001"}}},
      {"rmsprop_centered", "rmsprop", {{"learning_rate", "0.01"}, {"centered", "true"}, {"clip_weights", "0.9"}}},
      {"adagrad", "adagrad", {{"learning_rate", "0.1"}, {"wd", "0.001"}}},
  };
}

// Sizes across a chunk boundary (4096 elements per block) and tiny ones.
const std::vector<Shape> kShapes = {Shape({3, 3000}), Shape({17}), Shape({1}), Shape({64, 65})};

// One side of the comparison: an optimizer and its weights and gradients on `ctx`.
struct Side {
  std::unique_ptr<Optimizer> optimizer;
  std::vector<NDArray> weights, grads;
};

Side MakeSide(const Runtime& rt, const Config& c, Context ctx, bool scheduler) {
  Side side;
  auto made = Optimizer::Create(c.optimizer, c.params);
  TESSERA_CHECK(made.ok());
  side.optimizer = *std::move(made);
  side.optimizer->SetLrMult({{0, 0.5}, {3, 2.0}});
  side.optimizer->SetWdMult({{1, 0.0}});
  if (scheduler) {
    auto s = FactorScheduler::Create(/*step=*/3, /*factor=*/0.7, 1e-8, 0.1, Warmup{2, 0.01, WarmupMode::kLinear});
    TESSERA_CHECK(s.ok());
    side.optimizer->SetLrScheduler(*std::move(s));
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (const Shape& shape : kShapes) {
    std::vector<float> w(static_cast<size_t>(shape.Size()));
    for (float& v : w) v = dist(gen);
    auto weight = FromVector<float>(rt, shape, w, ctx);
    auto grad = FromVector<float>(rt, shape, std::vector<float>(w.size(), 0.f), ctx);
    TESSERA_CHECK(weight.ok() && grad.ok());
    side.weights.push_back(*weight);
    side.grads.push_back(*grad);
  }
  return side;
}

std::vector<int> Indices() {
  std::vector<int> out;
  for (size_t i = 0; i < kShapes.size(); ++i) out.push_back(static_cast<int>(i));
  return out;
}

// Step `step`'s gradients, the same on both sides.
void SetGrads(Side* side, int step) {
  std::mt19937 gen(1000 + step);
  std::normal_distribution<float> dist(0.f, 0.3f);
  for (NDArray& g : side->grads) {
    std::vector<float> v(static_cast<size_t>(g.Size()));
    for (float& x : v) x = dist(gen);
    ASSERT_THAT(g.SyncCopyFromCPU(v.data(), g.Size()), IsOk());
  }
}

void StepEach(Side* side, int step) {
  SetGrads(side, step);
  // Later parameters first, as Module::Update.
  for (int i = static_cast<int>(side->weights.size()) - 1; i >= 0; --i) {
    ASSERT_THAT(side->optimizer->Update(i, side->weights[i], side->grads[i], i), IsOk());
  }
}

void StepFused(Side* side, FusedUpdate* fused, int step) {
  SetGrads(side, step);
  ASSERT_THAT(fused->Step(), IsOk());
}

std::vector<uint8_t> Bits(const NDArray& a) {
  auto v = a.AsVector<float>();
  TESSERA_CHECK(v.ok());
  std::vector<uint8_t> bits(v->size() * sizeof(float));
  std::memcpy(bits.data(), v->data(), bits.size());
  return bits;
}

// The saved state with its device fields blanked, so states on two devices compare.
std::string StateOf(const Optimizer& optimizer) {
  auto saved = optimizer.SaveState();
  TESSERA_CHECK(saved.ok());
  return *saved;
}

void ExpectSameBits(const Side& each, const Side& fused, const std::string& what) {
  for (size_t i = 0; i < each.weights.size(); ++i) {
    EXPECT_EQ(Bits(each.weights[i]), Bits(fused.weights[i])) << what << ": weight " << i;
  }
  EXPECT_EQ(StateOf(*each.optimizer), StateOf(*fused.optimizer)) << what << ": optimizer state";
  EXPECT_EQ(each.optimizer->num_update(), fused.optimizer->num_update()) << what;
  EXPECT_EQ(each.optimizer->learning_rate(), fused.optimizer->learning_rate()) << what;
}

class FusedUpdateTest : public ::testing::TestWithParam<Context> {
 protected:
  void SetUp() override {
    if (GetParam().is_gpu()) TESSERA_SKIP_WITHOUT_GPU();
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  }
  const Runtime& rt() const { return owned_->get(); }
  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_P(FusedUpdateTest, EveryOptimizerMatchesUpdatingEachParameter) {
  for (const Config& c : Configs()) {
    for (bool scheduler : {false, true}) {
      const std::string what = absl::StrCat(c.name, scheduler ? " with a schedule" : "");
      Side each = MakeSide(rt(), c, GetParam(), scheduler);
      Side fused = MakeSide(rt(), c, GetParam(), scheduler);
      FusedUpdate::Options options;
      options.cuda_graphs = false;
      options.lookahead = 3;  // several windows in 8 steps
      auto f = FusedUpdate::Create(fused.optimizer.get(), Indices(), fused.weights, fused.grads, options);
      ASSERT_THAT(f, IsOk()) << what;
      const std::vector<uint8_t> initial = Bits(fused.weights[0]);
      for (int step = 0; step < 8; ++step) {
        StepEach(&each, step);
        StepFused(&fused, f->get(), step);
      }
      EXPECT_THAT((*f)->Check(), IsOk()) << what;
      EXPECT_NE(Bits(fused.weights[0]), initial) << what << ": nothing was updated";
      ExpectSameBits(each, fused, what);
    }
  }
}

// The rate, the multipliers and the whole state changed between steps are taken up at the
// next step, as they are by Update.
TEST_P(FusedUpdateTest, ChangesBetweenStepsAreTakenUp) {
  const Config c = Configs()[1];  // sgd with momentum
  Side each = MakeSide(rt(), c, GetParam(), false);
  Side fused = MakeSide(rt(), c, GetParam(), false);
  FusedUpdate::Options options;
  options.cuda_graphs = false;
  options.lookahead = 100;
  auto f = FusedUpdate::Create(fused.optimizer.get(), Indices(), fused.weights, fused.grads, options);
  ASSERT_THAT(f, IsOk());
  int step = 0;
  auto both = [&](int n) {
    for (int i = 0; i < n; ++i, ++step) {
      StepEach(&each, step);
      StepFused(&fused, f->get(), step);
    }
  };
  both(2);
  for (Side* s : {&each, &fused}) ASSERT_THAT(s->optimizer->SetLearningRate(0.03), IsOk());
  both(2);
  for (Side* s : {&each, &fused}) s->optimizer->SetLrMult({{2, 3.0}});
  both(2);
  // A state saved from the per-parameter side, loaded into both: the fused one continues
  // from its momentum and counts.
  const std::string saved = StateOf(*each.optimizer);
  for (Side* s : {&each, &fused}) ASSERT_THAT(s->optimizer->LoadState(rt(), saved), IsOk());
  both(3);
  EXPECT_THAT((*f)->Check(), IsOk());
  ExpectSameBits(each, fused, "after changes");
}

TEST_P(FusedUpdateTest, RefusesWhatUpdateRefuses) {
  const Config c = Configs()[1];
  Side side = MakeSide(rt(), c, GetParam(), false);
  Optimizer* opt = side.optimizer.get();
  EXPECT_THAT(FusedUpdate::Create(opt, {}, {}, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FusedUpdate::Create(opt, {0, 0}, {side.weights[0], side.weights[0]}, {side.grads[0], side.grads[0]}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("index 0 is given twice")));
  EXPECT_THAT(FusedUpdate::Create(opt, {0, 1}, {side.weights[0], side.weights[1]}, {side.grads[0], side.grads[0]}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("index 1")));
  auto doubles = NDArray::Empty(rt(), Shape({1}), GetParam(), DType::kFloat64);
  ASSERT_THAT(doubles, IsOk());
  EXPECT_THAT(FusedUpdate::Create(opt, {2}, {*doubles}, {*doubles}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("index 2")));
  // Parameters updated apart from each other cannot be fused, before or after creation.
  ASSERT_THAT(opt->Update(1, side.weights[1], side.grads[1]), IsOk());
  EXPECT_THAT(FusedUpdate::Create(opt, Indices(), side.weights, side.grads),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("updated together")));
  ASSERT_THAT(opt->Update(0, side.weights[0], side.grads[0]), IsOk());
  ASSERT_THAT(opt->Update(2, side.weights[2], side.grads[2]), IsOk());
  ASSERT_THAT(opt->Update(3, side.weights[3], side.grads[3]), IsOk());
  auto f = FusedUpdate::Create(opt, Indices(), side.weights, side.grads);
  ASSERT_THAT(f, IsOk());
  ASSERT_THAT((*f)->Step(), IsOk());
  ASSERT_THAT(opt->Update(3, side.weights[3], side.grads[3]), IsOk());
  EXPECT_THAT((*f)->Step(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("index")));
  EXPECT_EQ(opt->update_count(0, GetParam()), 2);  // the refused step counted nothing
}

// Sets the last element of `a` to `value`.
void Poison(NDArray a, float value) {
  auto v = a.AsVector<float>();
  ASSERT_THAT(v, IsOk());
  v->back() = value;
  ASSERT_THAT(a.SyncCopyFromCPU(v->data(), a.Size()), IsOk());
}

// Prepare + DeviceWork in a function of the caller's (how a training step's graph runs the
// update) gives Step's bits, across windows and a loaded state (new arrays: a new
// generation, whose variables the caller takes again).
TEST_P(FusedUpdateTest, PreparedStepsInAnotherFunctionMatchUpdatingEachParameter) {
  const Config c = Configs()[3];  // adam: its rate changes every step
  Side each = MakeSide(rt(), c, GetParam(), true);
  Side fused = MakeSide(rt(), c, GetParam(), true);
  FusedUpdate::Options options;
  options.lookahead = 3;
  auto f = FusedUpdate::Create(fused.optimizer.get(), Indices(), fused.weights, fused.grads, options);
  ASSERT_THAT(f, IsOk());
  const int64_t first_generation = (*f)->generation();
  for (int step = 0; step < 9; ++step) {
    if (step == 5) {
      const std::string saved = StateOf(*each.optimizer);
      for (Side* s : {&each, &fused}) ASSERT_THAT(s->optimizer->LoadState(rt(), saved), IsOk());
    }
    StepEach(&each, step);
    SetGrads(&fused, step);
    ASSERT_THAT((*f)->Prepare(), IsOk());
    ASSERT_THAT(rt().engine->PushSync((*f)->DeviceWork(), GetParam(), (*f)->read_vars(), (*f)->write_vars(),
                                      engine::FnProperty::kNormal, 0, "test_step"),
                IsOk());
  }
  EXPECT_GT((*f)->generation(), first_generation);
  EXPECT_THAT((*f)->Check(), IsOk());
  ExpectSameBits(each, fused, "prepared steps");
}

// check_finite: a NaN in one gradient is reported by a later Step and by Check, naming the
// update and the parameter; without the check nothing is reported.
TEST_P(FusedUpdateTest, NonfiniteGradientsAreReportedWithTheUpdateAndTheParameter) {
  const Config c = Configs()[1];
  for (bool check : {false, true}) {
    Side side = MakeSide(rt(), c, GetParam(), false);
    FusedUpdate::Options options;
    options.check_finite = check;
    options.names = {"fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"};
    auto f = FusedUpdate::Create(side.optimizer.get(), Indices(), side.weights, side.grads, options);
    ASSERT_THAT(f, IsOk());
    for (int step = 0; step < 5; ++step) StepFused(&side, f->get(), step);
    ASSERT_THAT((*f)->Check(), IsOk());
    // Update 6: a NaN in parameter 3 and an infinity in parameter 2; the first is named.
    SetGrads(&side, 5);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    Poison(side.grads[3], nan);  // its last element, in its second chunk
    Poison(side.grads[2], inf);
    ASSERT_THAT((*f)->Step(), IsOk());
    // Later steps fail once the host has seen it (at once on the CPU, a step or two later
    // on a GPU); without the check they go on.
    for (int step = 6; step < 8; ++step) {
      SetGrads(&side, step);
      const absl::Status later = (*f)->Step();
      if (!check) {
        EXPECT_THAT(later, IsOk());
      }
    }
    if (!check) {
      EXPECT_THAT((*f)->Check(), IsOk());
      continue;
    }
    const auto reported = StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("update 6"), HasSubstr("'fc2_weight' (index 2)")));
    EXPECT_THAT((*f)->Check(), reported);
    EXPECT_THAT((*f)->Step(), reported);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, FusedUpdateTest, ::testing::Values(Context::CPU(), Context::GPU(0)),
                         [](const ::testing::TestParamInfo<Context>& info) {
                           return info.param.is_gpu() ? std::string("Gpu") : std::string("Cpu");
                         });

// 1,000 steps of Adam with a warm-up and a factor schedule on the GPU, the step captured as
// a CUDA graph and replayed across windows of rows: the same bits as the uncaptured fused
// run and as updating each parameter.
TEST(FusedUpdateGpuTest, CapturedStepsEqualUncapturedOnesBitForBit) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  const Runtime& rt = owned->get();
  const Config c = Configs()[3];  // adam
  Side each = MakeSide(rt, c, Context::GPU(0), true);
  Side plain = MakeSide(rt, c, Context::GPU(0), true);
  Side graph = MakeSide(rt, c, Context::GPU(0), true);
  FusedUpdate::Options options;
  options.lookahead = 64;
  options.cuda_graphs = false;
  auto f_plain = FusedUpdate::Create(plain.optimizer.get(), Indices(), plain.weights, plain.grads, options);
  options.cuda_graphs = true;
  auto f_graph = FusedUpdate::Create(graph.optimizer.get(), Indices(), graph.weights, graph.grads, options);
  ASSERT_THAT(f_plain, IsOk());
  ASSERT_THAT(f_graph, IsOk());
  for (int step = 0; step < 1000; ++step) {
    StepEach(&each, step);
    StepFused(&plain, f_plain->get(), step);
    StepFused(&graph, f_graph->get(), step);
  }
  EXPECT_THAT((*f_graph)->Check(), IsOk());
  EXPECT_TRUE((*f_graph)->captured());
  ExpectSameBits(plain, graph, "captured against uncaptured");
  ExpectSameBits(each, graph, "captured against each parameter");
}

TEST(LossScalerTest, HalvesOnAnOverflowAndDoublesAfterTheGrowthIntervalWithinItsBounds) {
  internal::LossScalerState state;
  float scale = internal::kInitialLossScale;
  for (int64_t i = 1; i < internal::kLossScaleGrowthInterval; ++i) internal::AdvanceLossScale(&state, &scale);
  EXPECT_EQ(scale, 65536.0f);
  internal::AdvanceLossScale(&state, &scale);
  EXPECT_EQ(scale, 131072.0f);
  EXPECT_EQ(state.clean_steps, 0);
  for (int i = 0; i < 1000; ++i) internal::AdvanceLossScale(&state, &scale);
  state.overflow = 1;
  internal::AdvanceLossScale(&state, &scale);
  EXPECT_EQ(scale, 65536.0f);
  EXPECT_EQ(state.clean_steps, 0);  // an overflow restarts the interval
  EXPECT_EQ(state.skipped_steps, 1);
  EXPECT_EQ(state.overflow, 0);
  for (int i = 0; i < 40; ++i) {
    state.overflow = 1;
    internal::AdvanceLossScale(&state, &scale);
  }
  EXPECT_EQ(scale, internal::kMinLossScale);
  scale = internal::kMaxLossScale;
  for (int64_t i = 0; i < internal::kLossScaleGrowthInterval; ++i) internal::AdvanceLossScale(&state, &scale);
  EXPECT_EQ(scale, internal::kMaxLossScale);
}

// A fused update of `side` with dynamic loss scaling from 2^16, its rows 3 steps ahead (a
// new window every 3 steps).
absl::StatusOr<std::unique_ptr<FusedUpdate>> ScaledFusedUpdate(const Runtime& rt, const Side& side) {
  ASSIGN_OR_RETURN(NDArray scale,
                   FromVector<float>(rt, Shape({1}), std::vector<float>{FusedUpdate::kInitialLossScale}));
  FusedUpdate::Options options;
  options.lookahead = 3;
  options.loss_scale = scale;
  return FusedUpdate::Create(side.optimizer.get(), Indices(), side.weights, side.grads, options);
}

// Step `step`'s gradients times `scale` (an infinity in one of them for an overflow), then
// the fused step.
void ScaledStep(Side* side, FusedUpdate* fused, int step, float scale, bool overflow) {
  SetGrads(side, step);
  for (size_t i = 0; i < side->grads.size(); ++i) {
    auto g = side->grads[i].AsVector<float>();
    ASSERT_THAT(g, IsOk());
    for (float& v : *g) v *= scale;
    if (overflow && i == 1) (*g)[3] = -std::numeric_limits<float>::infinity();
    ASSERT_THAT(side->grads[i].SyncCopyFromCPU(g->data(), g->size()), IsOk());
  }
  ASSERT_THAT(fused->Step(), IsOk());
}

// Gradients that carry the loss scale update every optimizer's weights as the unscaled ones
// do through Update, bit for bit (the scale is a power of two); a step whose gradients hold
// an infinity changes no weight and halves the scale, on the device side of the CPU's push.
TEST(FusedUpdateLossScalingTest, ScaledGradientsUpdateAsUnscaledOnesAndAnOverflowIsSkipped) {
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  const Runtime& rt = owned->get();
  for (const Config& c : Configs()) {
    SCOPED_TRACE(c.name);
    Side each = MakeSide(rt, c, Context::CPU(), true);
    Side fused = MakeSide(rt, c, Context::CPU(), true);
    auto f = ScaledFusedUpdate(rt, fused);
    ASSERT_THAT(f, IsOk());
    auto scaled_step = [&](int step, bool overflow) {
      ScaledStep(&fused, f->get(), step, FusedUpdate::kInitialLossScale, overflow);
    };
    for (int step = 0; step < 5; ++step) {
      StepEach(&each, step);
      scaled_step(step, false);
    }
    ASSERT_THAT((*f)->Sync(), IsOk());  // the optimizer's counts follow the device's
    ExpectSameBits(each, fused, "scaled against unscaled");
    auto scaling = (*f)->loss_scaling();
    ASSERT_THAT(scaling, IsOk());
    EXPECT_EQ(scaling->scale, FusedUpdate::kInitialLossScale);
    EXPECT_EQ(scaling->skipped_steps, 0);

    std::vector<std::vector<uint8_t>> before;
    for (const NDArray& w : fused.weights) before.push_back(Bits(w));
    scaled_step(5, /*overflow=*/true);
    for (size_t i = 0; i < fused.weights.size(); ++i) EXPECT_EQ(Bits(fused.weights[i]), before[i]) << i;
    scaling = (*f)->loss_scaling();
    ASSERT_THAT(scaling, IsOk());
    EXPECT_EQ(scaling->scale, FusedUpdate::kInitialLossScale / 2);
    EXPECT_EQ(scaling->skipped_steps, 1);
    EXPECT_THAT((*f)->Check(), IsOk());  // the device counted the applied steps only
  }
}

// A step skipped for an overflow is no update, as MXNet's AMP skips the trainer's: the
// weights, states, counts, num_update, the schedule's rate and its state equal those of
// updating each parameter through the clean steps only - across several windows of rows
// (lookahead 3) and a schedule that changes the rate every 3 updates, synced in the middle
// and at the end.
TEST(FusedUpdateLossScalingTest, ASkippedStepAdvancesNeitherTheScheduleNorTheCounts) {
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  const Runtime& rt = owned->get();
  const std::set<int> overflows = {2, 3, 7, 12, 13, 14};
  for (const Config& c : Configs()) {
    SCOPED_TRACE(c.name);
    Side each = MakeSide(rt, c, Context::CPU(), /*scheduler=*/true);
    Side fused = MakeSide(rt, c, Context::CPU(), /*scheduler=*/true);
    auto f = ScaledFusedUpdate(rt, fused);
    ASSERT_THAT(f, IsOk());
    float current = FusedUpdate::kInitialLossScale;
    for (int step = 0; step < 20; ++step) {
      const bool overflow = overflows.contains(step);
      if (!overflow) StepEach(&each, step);
      ScaledStep(&fused, f->get(), step, current, overflow);
      if (overflow) current /= 2;
      if (step == 9) {
        ASSERT_THAT((*f)->Sync(), IsOk());
        ExpectSameBits(each, fused, "after 10 steps");
      }
    }
    ASSERT_THAT((*f)->Sync(), IsOk());
    ExpectSameBits(each, fused, "after 20 steps");
    EXPECT_EQ(fused.optimizer->num_update(), 20 - static_cast<int64_t>(overflows.size()));
    EXPECT_THAT((*f)->Check(), IsOk());
    auto scaling = (*f)->loss_scaling();
    ASSERT_THAT(scaling, IsOk());
    EXPECT_EQ(scaling->skipped_steps, static_cast<int64_t>(overflows.size()));
    EXPECT_EQ(scaling->scale, current);
  }
}

TEST(FusedUpdateLossScalingTest, AScaleOfAnotherShapeOrWithCheckFiniteIsRefused) {
  auto owned = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  const Runtime& rt = owned->get();
  Side side = MakeSide(rt, Configs()[0], Context::CPU(), false);
  FusedUpdate::Options options;
  auto two = FromVector<float>(rt, Shape({2}), std::vector<float>{1, 1});
  ASSERT_THAT(two, IsOk());
  options.loss_scale = *two;
  EXPECT_THAT(FusedUpdate::Create(side.optimizer.get(), Indices(), side.weights, side.grads, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(1,) float32")));
  auto one = FromVector<float>(rt, Shape({1}), std::vector<float>{1});
  ASSERT_THAT(one, IsOk());
  options.loss_scale = *one;
  options.check_finite = true;
  EXPECT_THAT(FusedUpdate::Create(side.optimizer.get(), Indices(), side.weights, side.grads, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("check_finite")));
}

}  // namespace
}  // namespace tessera::kvstore

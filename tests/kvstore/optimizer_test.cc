// Optimizers: three updates of each against values worked out by hand and against a float64
// transcription of MXNet's formulas (with weight decay, momentum, clipping, rescaling and
// per-index multipliers), the update bookkeeping, schedulers, SaveState/LoadState resuming
// bit for bit, and every error.
#include "kvstore/optimizer.h"
#include "kvstore/key_slices.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;

class OptimizerTest : public tessera::testing::EngineTest {
 protected:
  NDArray Make(std::vector<float> v, Context ctx = Context::CPU()) {
    return *FromVector<float>(rt(), Shape{static_cast<int64_t>(v.size())}, v, ctx);
  }
  std::unique_ptr<Optimizer> Create(const std::string& name, const ops::KwArgs& params) {
    auto opt = Optimizer::Create(name, params);
    EXPECT_THAT(opt, IsOk());
    return std::move(opt).value();
  }
  // Three updates of a one-element weight 1.0 by a constant gradient 0.5.
  std::vector<float> ThreeSteps(const std::string& name, const ops::KwArgs& params) {
    auto opt = Create(name, params);
    NDArray w = Make({1.0f}), g = Make({0.5f});
    std::vector<float> out;
    for (int t = 0; t < 3; ++t) {
      EXPECT_THAT(opt->Update(0, w, g), IsOk());
      out.push_back((*w.AsVector<float>())[0]);
    }
    return out;
  }
};
TESSERA_INSTANTIATE_ENGINES(OptimizerTest);

// By hand: mom = 0.9 mom - 0.1 * 0.5, w += mom: -0.05, -0.095, -0.1355.
TEST_P(OptimizerTest, SgdMomentumByHand) {
  EXPECT_THAT(
      ThreeSteps("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}),
      ElementsAre(FloatNear(0.95f, 1e-6), FloatNear(0.855f, 1e-6), FloatNear(0.7195f, 1e-6)));
}

// By hand, with wd 0.1 and no momentum: w = (1 - 0.01) w - 0.05.
TEST_P(OptimizerTest, SgdWeightDecayByHand) {
  EXPECT_THAT(
      ThreeSteps("SGD", {{"learning_rate", "0.1"}, {"wd", "0.1"}}),
      ElementsAre(FloatNear(0.94f, 1e-6), FloatNear(0.8806f, 1e-6), FloatNear(0.821794f, 1e-6)));
}

// With a constant gradient the bias-corrected step is lr * m_hat / sqrt(v_hat) = lr (up to
// epsilon): the bias correction is in the rate, or the first steps would be far shorter.
TEST_P(OptimizerTest, AdamByHand) {
  EXPECT_THAT(ThreeSteps("adam", {{"learning_rate", "0.1"}}),
              ElementsAre(FloatNear(0.9f, 2e-6), FloatNear(0.8f, 2e-6), FloatNear(0.7f, 3e-6)));
}

// n = 0.1 * 0.25 + 0.9 n: 0.025, 0.0475, 0.06775; w -= 0.01 * 0.5 / sqrt(n + 1e-8).
TEST_P(OptimizerTest, RmsPropByHand) {
  EXPECT_THAT(ThreeSteps("rmsprop", {{"learning_rate", "0.01"}}),
              ElementsAre(FloatNear(0.9683772f, 1e-6), FloatNear(0.9454356f, 1e-6),
                          FloatNear(0.9262262f, 1e-6)));
}

// history = 0.25, 0.5, 0.75; w -= 0.1 * 0.5 / sqrt(history).
TEST_P(OptimizerTest, AdaGradByHand) {
  EXPECT_THAT(
      ThreeSteps("adagrad", {{"learning_rate", "0.1"}}),
      ElementsAre(FloatNear(0.9f, 1e-6), FloatNear(0.8292894f, 1e-6), FloatNear(0.7715544f, 1e-6)));
}

// ---- Against float64 transcriptions of the MXNet formulas ----

double Clip(double x, double c) { return c < 0 ? x : std::clamp(x, -c, c); }

struct RefState {
  std::vector<double> w, s0, s1, s2;
  int t = 0;
};
// One update of the reference with the effective lr and wd of the index.
using RefUpdate =
    std::function<void(RefState&, const std::vector<double>& g, double lr, double wd)>;

struct RefCase {
  std::string name;
  ops::KwArgs params;
  double lr, wd;
  RefUpdate update;
};

constexpr double kRescale = 0.5, kClip = 0.4;

std::vector<RefCase> RefCases() {
  const ops::KwArgs common = {{"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.4"}};
  auto with = [&](ops::KwArgs extra) {
    ops::KwArgs all = common;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  std::vector<RefCase> cases;
  cases.push_back({"sgd", with({{"learning_rate", "0.1"}, {"momentum", "0.9"}}), 0.1, 0.01,
                   [](RefState& r, const std::vector<double>& g, double lr, double wd) {
                     for (size_t i = 0; i < g.size(); ++i) {
                       r.s0[i] =
                           0.9 * r.s0[i] - lr * wd * r.w[i] - lr * Clip(kRescale * g[i], kClip);
                       r.w[i] += r.s0[i];
                     }
                   }});
  cases.push_back({"sgd", with({{"learning_rate", "0.1"}}), 0.1, 0.01,
                   [](RefState& r, const std::vector<double>& g, double lr, double wd) {
                     for (size_t i = 0; i < g.size(); ++i) {
                       r.w[i] = (1 - lr * wd) * r.w[i] - lr * Clip(kRescale * g[i], kClip);
                     }
                   }});
  cases.push_back(
      {"adam",
       with({{"learning_rate", "0.01"}, {"beta1", "0.8"}, {"beta2", "0.9"}, {"epsilon", "1e-6"}}),
       0.01, 0.01, [](RefState& r, const std::vector<double>& g, double lr, double wd) {
         ++r.t;
         const double lr_t = lr * std::sqrt(1 - std::pow(0.9, r.t)) / (1 - std::pow(0.8, r.t));
         for (size_t i = 0; i < g.size(); ++i) {
           const double gr = Clip(kRescale * g[i] + wd * r.w[i], kClip);
           r.s0[i] = 0.8 * r.s0[i] + 0.2 * gr;
           r.s1[i] = 0.9 * r.s1[i] + 0.1 * gr * gr;
           r.w[i] -= lr_t * r.s0[i] / (std::sqrt(r.s1[i]) + 1e-6);
         }
       }});
  cases.push_back({"rmsprop",
                   with({{"learning_rate", "0.01"},
                         {"gamma1", "0.8"},
                         {"epsilon", "1e-6"},
                         {"clip_weights", "0.9"}}),
                   0.01, 0.01, [](RefState& r, const std::vector<double>& g, double lr, double wd) {
                     for (size_t i = 0; i < g.size(); ++i) {
                       const double gr = Clip(kRescale * g[i] + wd * r.w[i], kClip);
                       r.s0[i] = 0.2 * gr * gr + 0.8 * r.s0[i];
                       r.w[i] = Clip(r.w[i] - lr * gr / std::sqrt(r.s0[i] + 1e-6), 0.9);
                     }
                   }});
  cases.push_back({"rmsprop",
                   with({{"learning_rate", "0.01"},
                         {"gamma1", "0.8"},
                         {"gamma2", "0.7"},
                         {"epsilon", "1e-6"},
                         {"centered", "true"}}),
                   0.01, 0.01, [](RefState& r, const std::vector<double>& g, double lr, double wd) {
                     for (size_t i = 0; i < g.size(); ++i) {
                       const double gr = Clip(kRescale * g[i] + wd * r.w[i], kClip);
                       r.s0[i] = 0.2 * gr * gr + 0.8 * r.s0[i];
                       r.s1[i] = 0.2 * gr + 0.8 * r.s1[i];
                       r.s2[i] =
                           0.7 * r.s2[i] - lr * gr / std::sqrt(r.s0[i] - r.s1[i] * r.s1[i] + 1e-6);
                       r.w[i] += r.s2[i];
                     }
                   }});
  cases.push_back({"adagrad", with({{"learning_rate", "0.1"}, {"eps", "1e-6"}}), 0.1, 0.01,
                   [](RefState& r, const std::vector<double>& g, double lr, double wd) {
                     for (size_t i = 0; i < g.size(); ++i) {
                       const double gr = Clip(kRescale * g[i], kClip);  // wd is not clipped
                       r.s0[i] += gr * gr;
                       r.w[i] += (gr / std::sqrt(r.s0[i] + 1e-6) + r.w[i] * wd) * -lr;
                     }
                   }});
  return cases;
}

// Index 1 has lr_mult 2 and wd_mult 0.5; index 0 the plain rates. Gradients beyond 0.8 are
// clipped after rescaling by 0.5.
TEST_P(OptimizerTest, MatchesReferenceFormulas) {
  const std::vector<double> w0 = {1.0, -0.5, 0.25, 2.0, -1.5, 0.8};
  const std::vector<std::vector<double>> grads = {{0.3, -2.0, 0.1, 1.5, -0.2, 0.9},
                                                  {-0.4, 0.6, 3.0, -0.1, 0.05, -1.2},
                                                  {0.2, 0.2, -0.7, 0.0, 1.1, 0.4}};
  for (const RefCase& c : RefCases()) {
    SCOPED_TRACE(c.name + " " + c.params.back().first + "=" + c.params.back().second);
    auto opt = Create(c.name, c.params);
    opt->SetLrMult({{1, 2.0}});
    opt->SetWdMult({{1, 0.5}});
    const std::vector<float> w0f(w0.begin(), w0.end());
    NDArray w[2] = {Make(w0f), Make(w0f)};
    RefState ref[2];
    for (RefState& r : ref) {
      r.w = w0;
      r.s0 = r.s1 = r.s2 = std::vector<double>(w0.size(), 0.0);
    }
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> gf(grads[t].begin(), grads[t].end());
      for (int index = 0; index < 2; ++index) {
        ASSERT_THAT(opt->Update(index, w[index], Make(gf)), IsOk());
        c.update(ref[index], grads[t], c.lr * (index == 1 ? 2.0 : 1.0),
                 c.wd * (index == 1 ? 0.5 : 1.0));
        const std::vector<float> got = *w[index].AsVector<float>();
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i], ref[index].w[i], 1e-5 * std::max(1.0, std::abs(ref[index].w[i])))
              << "step " << t + 1 << " index " << index << " element " << i;
        }
      }
    }
    EXPECT_EQ(opt->num_update(), 3);
    EXPECT_EQ(opt->update_count(1), 3);
  }
}

// A parameter server's slice of a big key (key_slices.h) is updated with its key's lr_mult
// and wd_mult, and keeps its own state.
TEST_P(OptimizerTest, ASliceTakesItsKeysMultipliers) {
  auto sliced = Create("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}});
  auto whole = Create("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}});
  for (auto* opt : {&sliced, &whole}) {
    (*opt)->SetLrMult({{3, 2.0}});
    (*opt)->SetWdMult({{3, 0.0}});
  }
  NDArray a = Make({1.0f, -2.0f}), b = Make({1.0f, -2.0f});
  for (int t = 0; t < 2; ++t) {
    ASSERT_THAT(sliced->Update(3 + 2 * kSliceKeyStride, a, Make({0.5f, 0.25f})), IsOk());
    ASSERT_THAT(whole->Update(3, b, Make({0.5f, 0.25f})), IsOk());
  }
  EXPECT_EQ(*a.AsVector<float>(), *b.AsVector<float>());
  EXPECT_EQ(sliced->update_count(3 + 2 * kSliceKeyStride), 2);
  EXPECT_EQ(sliced->update_count(3), 0);
}

// ---- Bookkeeping ----

TEST_P(OptimizerTest, SchedulerSeesNumUpdateAndStatePerDevice) {
  auto opt = Create("sgd", {{"learning_rate", "1"}});
  opt->SetLrScheduler(*FactorScheduler::Create(/*step=*/2, /*factor=*/0.5, 1e-8, /*base_lr=*/7));
  // An explicit learning_rate restarts the scheduler from it, as MXNet's constructor does.
  EXPECT_DOUBLE_EQ(opt->learning_rate(), 1.0);
  NDArray a = Make({0}), b = Make({0}, Context::CPU(1)), ga = Make({1}),
          gb = Make({1}, Context::CPU(1));
  // Updates 1 and 2 at rate 1, then 0.5: index 0 on two devices counts separately.
  for (int t = 0; t < 3; ++t) {
    ASSERT_THAT(opt->Update(0, a, ga), IsOk());
    ASSERT_THAT(opt->Update(0, b, gb), IsOk());
  }
  EXPECT_EQ(opt->update_count(0, Context::CPU()), 3);
  EXPECT_EQ(opt->update_count(0, Context::CPU(1)), 3);
  EXPECT_EQ(opt->num_update(), 3);
  EXPECT_THAT(*a.AsVector<float>(), ElementsAre(-2.5f));
  EXPECT_THAT(*b.AsVector<float>(), ElementsAre(-2.5f));
  EXPECT_THAT(opt->SetLearningRate(0.1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("factor")));
  opt->SetLrScheduler(nullptr);
  EXPECT_THAT(opt->SetLearningRate(0.1), IsOk());
  EXPECT_DOUBLE_EQ(opt->learning_rate(), 0.1);
}

// Without an explicit learning_rate the scheduler's own base_lr stands.
TEST_P(OptimizerTest, SchedulerKeepsItsBaseLrWhenNoneGiven) {
  auto opt = Create("adam", {});
  opt->SetLrScheduler(*CosineScheduler::Create(10, /*base_lr=*/0.5));
  EXPECT_DOUBLE_EQ(opt->learning_rate(), 0.5);
}

// ---- SaveState / LoadState ----

struct Training {
  std::unique_ptr<Optimizer> opt;
  std::vector<NDArray> weights;
};

// Six steps uninterrupted vs three, save, a fresh optimizer and fresh weights, load, three more.
TEST_P(OptimizerTest, ResumeIsBitIdentical) {
  const std::vector<std::pair<std::string, ops::KwArgs>> configs = {
      {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.001"}}},
      {"adam", {{"learning_rate", "0.01"}, {"clip_gradient", "0.5"}}},
      {"rmsprop", {{"centered", "1"}, {"learning_rate", "0.01"}}},
      {"adagrad", {{"learning_rate", "0.1"}}}};
  const std::vector<Context> devices = {Context::CPU(0), Context::CPU(1)};
  auto grad = [&](int step, int index) {
    std::vector<float> g(5);
    for (int i = 0; i < 5; ++i) g[i] = std::sin(1.7f * step + 0.3f * i + index);
    return Make(g, devices[index]);
  };
  for (const auto& [name, params] : configs) {
    SCOPED_TRACE(name);
    auto start = [&, name = name, params = params] {
      Training run{Create(name, params), {}};
      run.opt->SetLrScheduler(*MultiFactorScheduler::Create({2, 4}, 0.5, 0.1));
      return run;
    };
    auto steps = [&](Training& run, int from, int to) {
      for (int s = from; s < to; ++s) {
        for (int index = 0; index < 2; ++index) {
          ASSERT_THAT(run.opt->Update(index, run.weights[index], grad(s, index)), IsOk());
        }
      }
    };
    Training whole = start(), first = start();
    for (Training* run : {&whole, &first}) {
      for (int index = 0; index < 2; ++index) {
        run->weights.push_back(Make({0.5f, -0.25f, 1, 2, -3}, devices[index]));
      }
    }
    steps(whole, 0, 6);
    steps(first, 0, 3);
    absl::StatusOr<std::string> saved = first.opt->SaveState();
    ASSERT_THAT(saved, IsOk());
    Training resumed = start();
    for (int index = 0; index < 2; ++index) {
      resumed.weights.push_back(Make(*first.weights[index].AsVector<float>(), devices[index]));
    }
    first = Training{};  // nothing of the first run survives but the bytes
    ASSERT_THAT(resumed.opt->LoadState(rt(), *saved), IsOk());
    EXPECT_EQ(resumed.opt->num_update(), 3);
    EXPECT_EQ(resumed.opt->update_count(1, Context::CPU(1)), 3);
    steps(resumed, 3, 6);
    for (int index = 0; index < 2; ++index) {
      EXPECT_EQ(*resumed.weights[index].AsVector<float>(), *whole.weights[index].AsVector<float>());
    }
    EXPECT_EQ(resumed.opt->learning_rate(), whole.opt->learning_rate());
  }
}

TEST_P(OptimizerTest, LoadStateRejectsForeignOrCorruptStateAndChangesNothing) {
  auto adam = Create("adam", {});
  auto sgd_mom = Create("sgd", {{"momentum", "0.9"}});
  auto sgd = Create("sgd", {});
  NDArray w = Make({1, 2}), g = Make({1, 1});
  ASSERT_THAT(adam->Update(3, w, g), IsOk());
  ASSERT_THAT(sgd_mom->Update(3, w, g), IsOk());
  ASSERT_THAT(sgd->Update(3, w, g), IsOk());
  const std::string adam_state = *adam->SaveState();
  const std::string sgd_mom_state = *sgd_mom->SaveState();
  EXPECT_THAT(sgd->LoadState(rt(), adam_state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("saved by \"adam\"")));
  EXPECT_THAT(sgd->LoadState(rt(), sgd_mom_state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 state arrays")));
  EXPECT_THAT(sgd->LoadState(rt(), "not a state at all"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad magic")));
  for (size_t cut : {size_t{12}, size_t{40}, adam_state.size() - 1}) {
    EXPECT_THAT(adam->LoadState(rt(), adam_state.substr(0, cut)),
                StatusIs(absl::StatusCode::kDataLoss))
        << "cut at " << cut;
  }
  auto with_scheduler = Create("adam", {});
  with_scheduler->SetLrScheduler(*FactorScheduler::Create(5));
  EXPECT_THAT(with_scheduler->LoadState(rt(), adam_state),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no scheduler")));
  EXPECT_EQ(sgd->update_count(3), 1);
  EXPECT_EQ(adam->update_count(3), 1);
  EXPECT_EQ(*adam->SaveState(), adam_state);
}

// ---- Errors ----

TEST_P(OptimizerTest, BadParametersNameOptimizerAndParameter) {
  EXPECT_THAT(Optimizer::Create("lbfgs", {}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       HasSubstr("unknown optimizer \"lbfgs\"")));
  EXPECT_THAT(Optimizer::Create("sgd", {{"momentum", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("sgd"), HasSubstr("'momentum'"))));
  EXPECT_THAT(Optimizer::Create("adam", {{"beta1", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("adam"), HasSubstr("'beta1'"))));
  EXPECT_THAT(Optimizer::Create("rmsprop", {{"learning_rate", "-1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'learning_rate'")));
  EXPECT_THAT(
      Optimizer::Create("adagrad", {{"epsilon", "1e-7"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown parameter 'epsilon'")));
  EXPECT_THAT(Optimizer::Create("sgd", {{"wd", "nan"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'wd'")));
}

TEST_P(OptimizerTest, BadArraysAreRejectedBeforeAnythingIsCounted) {
  auto opt = Create("sgd", {{"momentum", "0.5"}});
  NDArray w = Make({1, 2}), g = Make({1, 1});
  NDArray g3 = Make({1, 1, 1}), g_other = Make({1, 1}, Context::CPU(1));
  NDArray w64 = *FromVector<double>(rt(), Shape{2}, std::vector<double>{1, 2});
  EXPECT_THAT(opt->Update(0, w, g3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad shape (3,)")));
  EXPECT_THAT(opt->Update(0, w, g_other),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad on cpu(1)")));
  EXPECT_THAT(opt->Update(0, w64, w64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float32")));
  EXPECT_THAT(opt->Update(0, NDArray(), g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none array")));
  EXPECT_EQ(opt->num_update(), 0);
  ASSERT_THAT(opt->Update(0, w, g), IsOk());
  NDArray w3 = Make({1, 2, 3});
  EXPECT_THAT(opt->Update(0, w3, g3), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("optimizer state has shape (2,)")));
  EXPECT_EQ(opt->update_count(0), 1);
}

}  // namespace
}  // namespace tessera::kvstore

// The Module trainer on synthetic data: it learns, checkpoints resume bit for bit, every
// local KVStore type over several devices agrees with one device, and Score/Predict.
#include "train/module.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "core/file.h"
#include "core/status_matchers.h"
#include "examples/models.h"
#include "gmock/gmock.h"
#include "graph/symbol_json.h"
#include "gtest/gtest.h"
#include "io/ndarray_iter.h"
#include "tests/gpu_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using tessera::testing::IsOk;
using tessera::testing::IsOkAndHolds;
using tessera::testing::StatusIs;

std::string TempPrefix(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

class ModuleTest : public ::testing::Test {
 protected:
  void SetUp() override { owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded); }
  const Runtime& rt() { return owned_->get(); }

  // 200 samples of 10 features; the class is which of 3 fixed directions scores highest.
  // nan_sample >= 0: that sample's features are NaN.
  std::unique_ptr<io::NDArrayIter> Data(bool shuffle, int batch = 20, int nan_sample = -1) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::vector<float> x(200 * 10), y(200);
    for (int i = 0; i < 200; ++i) {
      float best = -1e9f;
      for (int c = 0; c < 3; ++c) {
        float score = 0;
        for (int j = 0; j < 10; ++j) {
          if (c == 0) x[i * 10 + j] = normal(rng);
          score += x[i * 10 + j] * static_cast<float>(((c + 1) * (j + 2)) % 5 - 2);
        }
        if (score > best) best = score, y[i] = static_cast<float>(c);
      }
    }
    if (nan_sample >= 0) {
      std::fill_n(x.begin() + nan_sample * 10, 10, std::numeric_limits<float>::quiet_NaN());
    }
    auto data = FromVector<float>(rt(), Shape{200, 10}, x);
    auto label = FromVector<float>(rt(), Shape{200}, y);
    TESSERA_CHECK(data.ok() && label.ok());
    auto iter = io::NDArrayIter::Create(rt(), *data, *label, {.batch_size = batch, .shuffle = shuffle, .seed = 5});
    TESSERA_CHECK(iter.ok());
    return std::move(iter).value();
  }

  graph::Symbol Net() {
    auto net = examples::MlpWithWidths({16}, 3);
    TESSERA_CHECK(net.ok());
    return *net;
  }

  static std::map<std::string, std::vector<float>> Values(const Module& m) {
    auto params = m.GetArgParams();
    TESSERA_CHECK(params.ok());
    std::map<std::string, std::vector<float>> out;
    for (const auto& [name, a] : *params) out[name] = *a.AsVector<float>();
    return out;
  }

  // `mod`'s accuracy on the unshuffled data (-1 when scoring fails, which is reported).
  double TestAccuracy(Module* mod) {
    auto test = Data(false);
    auto metric = CreateMetric("acc");
    EXPECT_THAT(metric.status(), IsOk());
    if (!metric.ok()) return -1;
    auto score = mod->Score(test.get(), metric->get());
    EXPECT_THAT(score.status(), IsOk());
    return score.ok() ? (*score)[0].second : -1;
  }

  FitOptions Options(int num_epoch) {
    return {.num_epoch = num_epoch, .optimizer = "sgd",
            .optimizer_params = {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.0001"}}, .seed = 11};
  }

  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(ModuleTest, FitLearnsAndScores) {
  auto train = Data(true);
  Module mod(rt(), Net());
  std::vector<double> accuracy;
  FitOptions options = Options(25);
  int batches = 0;
  options.batch_end_callback = [&](const BatchEndParam&) { ++batches; };
  options.epoch_end_callback = [&](int, const auto& train_metric, const auto&) {
    accuracy.push_back(train_metric[0].second);
    return absl::OkStatus();
  };
  ASSERT_THAT(mod.Fit(train.get(), nullptr, options), IsOk());
  EXPECT_EQ(batches, 25 * 10);
  ASSERT_EQ(accuracy.size(), 25u);
  EXPECT_GT(accuracy.back(), 0.9);
  EXPECT_GT(accuracy.back(), accuracy.front());
  EXPECT_GT(TestAccuracy(&mod), 0.9);
  auto test = Data(false);
  auto predicted = mod.Predict(test.get());
  ASSERT_THAT(predicted.status(), IsOk());
  EXPECT_EQ((*predicted)[0].shape(), (Shape{200, 3}));
}

TEST_F(ModuleTest, LearningRateScheduleIsApplied) {
  auto train = Data(false);
  Module mod(rt(), Net());
  FitOptions options = Options(2);
  // 10 batches per epoch, 20 updates. MXNet's FactorScheduler halves once num_update
  // exceeds the last boundary + step: after updates 6, 11 and 16.
  options.lr_scheduler = []() -> absl::StatusOr<std::unique_ptr<kvstore::LRScheduler>> {
    return kvstore::FactorScheduler::Create(5, 0.5);
  };
  ASSERT_THAT(mod.Fit(train.get(), nullptr, options), IsOk());
  ASSERT_NE(mod.optimizer(), nullptr);
  EXPECT_DOUBLE_EQ(mod.optimizer()->learning_rate(), 0.1 / 8);
}

TEST_F(ModuleTest, CheckpointResumeReproducesTheUninterruptedRun) {
  const std::string prefix = TempPrefix("resume");
  auto train = Data(true);
  Module full(rt(), Net());
  FitOptions options = Options(4);
  options.checkpoint_prefix = prefix;
  ASSERT_THAT(full.Fit(train.get(), nullptr, options), IsOk());
  const auto want = Values(full);

  auto ckpt = Module::LoadCheckpoint(rt(), prefix, 2);
  ASSERT_THAT(ckpt.status(), IsOk());
  auto resumed_data = Data(true);
  Module resumed(rt(), ckpt->symbol);
  ASSERT_THAT(resumed.Bind(resumed_data->provide_data(), resumed_data->provide_label()), IsOk());
  ASSERT_THAT(resumed.InitParams(Xavier(), ckpt->arg_params, ckpt->aux_params), IsOk());
  ASSERT_THAT(resumed.InitOptimizer("local", options.optimizer, options.optimizer_params), IsOk());
  ASSERT_THAT(resumed.LoadOptimizerStates(prefix + "-0002.states"), IsOk());
  FitOptions rest = Options(4);
  rest.begin_epoch = 2;
  ASSERT_THAT(resumed.Fit(resumed_data.get(), nullptr, rest), IsOk());
  EXPECT_EQ(Values(resumed), want) << "bit-for-bit equality";

  // Without the optimizer state (momentum) the run differs: the test can fail.
  auto no_state_data = Data(true);
  Module no_state(rt(), ckpt->symbol);
  ASSERT_THAT(no_state.Bind(no_state_data->provide_data(), no_state_data->provide_label()), IsOk());
  ASSERT_THAT(no_state.InitParams(Xavier(), ckpt->arg_params, ckpt->aux_params), IsOk());
  ASSERT_THAT(no_state.Fit(no_state_data.get(), nullptr, rest), IsOk());
  EXPECT_NE(Values(no_state), want);
}

TEST_F(ModuleTest, LocalKVStoreTypesOverSeveralDevicesAgreeWithOneDevice) {
  auto one_data = Data(true);
  Module one(rt(), Net());
  ASSERT_THAT(one.Fit(one_data.get(), nullptr, Options(2)), IsOk());
  const auto want = Values(one);
  for (const char* type : {"local", "local_update_cpu", "local_allreduce_cpu", "local_allreduce_device"}) {
    SCOPED_TRACE(type);
    auto data = Data(true);
    Module many(rt(), Net(), {.contexts = {Context::CPU(0), Context::CPU(1), Context::CPU(2)}});
    FitOptions options = Options(2);
    options.kvstore = type;
    ASSERT_THAT(many.Fit(data.get(), nullptr, options), IsOk());
    const auto got = Values(many);
    for (const auto& [name, values] : want) {
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_NEAR(got.at(name)[i], values[i], 1e-4 * std::max(1.0f, std::abs(values[i]))) << name << "[" << i << "]";
      }
    }
  }
}

TEST_F(ModuleTest, FineTuningStartsFromAParameterFileOfEitherFormat) {
  const std::string prefix = TempPrefix("finetune");
  auto train = Data(true);
  Module trained(rt(), Net());
  FitOptions options = Options(2);
  options.checkpoint_prefix = prefix;
  options.checkpoint_format = ParamsFormat::kMxnet;
  ASSERT_THAT(trained.Fit(train.get(), nullptr, options), IsOk());
  const std::string file = prefix + "-0002.params";
  auto bytes = ReadFileToString(file);
  ASSERT_THAT(bytes.status(), IsOk());
  ASSERT_GE(bytes->size(), 8u);
  EXPECT_EQ(bytes->substr(0, 8), std::string("\x12\x01\0\0\0\0\0\0", 8)) << "MXNet's list magic";

  auto data = Data(true);
  Module tuned(rt(), Net());
  ASSERT_THAT(tuned.Bind(data->provide_data(), data->provide_label()), IsOk());
  ASSERT_THAT(tuned.LoadParams(file, {}), IsOk());
  EXPECT_EQ(Values(tuned), Values(trained));

  // Gluon's save_parameters writes plain names; a Tessera file loads the same way.
  auto args = trained.GetArgParams();
  ASSERT_THAT(args.status(), IsOk());
  const std::string plain = TempPrefix("finetune-plain.params");
  ASSERT_THAT(SaveParamsFile(plain, *args, ParamsFormat::kTessera), IsOk());
  Module from_plain(rt(), Net());
  ASSERT_THAT(from_plain.Bind(data->provide_data(), data->provide_label()), IsOk());
  ASSERT_THAT(from_plain.LoadParams(plain, {}), IsOk());
  EXPECT_EQ(Values(from_plain), Values(trained));

  // What the file lacks or adds is an error naming it unless allowed, as Module.set_params.
  std::map<std::string, NDArray> partial = *args;
  partial.erase("fc1_bias");
  auto extra = FromVector<float>(rt(), Shape{2}, std::vector<float>{1, 2});
  ASSERT_THAT(extra.status(), IsOk());
  EXPECT_THAT(tuned.SetParams(partial, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fc1_bias")));
  ASSERT_THAT(tuned.SetParams(partial, {}, {.allow_missing = true}), IsOk());
  EXPECT_EQ(Values(tuned).at("fc1_weight"), Values(trained).at("fc1_weight"));
  EXPECT_NE(Values(tuned).at("fc1_bias"), Values(trained).at("fc1_bias")) << "initialized";
  partial = *args;
  partial["old_head_weight"] = *extra;
  EXPECT_THAT(tuned.SetParams(partial, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("old_head_weight")));
  EXPECT_THAT(tuned.SetParams(partial, {}, {.allow_extra = true}), IsOk());
  EXPECT_THAT(tuned.LoadParams(TempPrefix("no-such.params"), {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such.params")));
}

TEST_F(ModuleTest, FixedParametersAndAZeroLrMultAreNotTrained) {
  auto data = Data(true);
  Module fixed(rt(), Net(), {.fixed_param_names = {"fc1_weight"}});
  ASSERT_THAT(fixed.Bind(data->provide_data(), data->provide_label()), IsOk());
  ASSERT_THAT(fixed.InitParams(Xavier(), {}, {}, 11), IsOk());
  const auto before = Values(fixed);
  ASSERT_THAT(fixed.Fit(data.get(), nullptr, Options(2)), IsOk());
  EXPECT_EQ(Values(fixed).at("fc1_weight"), before.at("fc1_weight"));
  EXPECT_NE(Values(fixed).at("fc2_weight"), before.at("fc2_weight"));
  Module typo(rt(), Net(), {.fixed_param_names = {"fc1_wieght"}});
  EXPECT_THAT(typo.Bind(data->provide_data(), data->provide_label()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fc1_wieght'")));

  // MXNet 0.8 wrote variable attributes without underscores; both spellings reach the
  // optimizer, as MXNet's Module passes them.
  auto net = graph::SymbolFromJson(R"({"nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "null", "name": "fc_weight", "attr": {"lr_mult": "0"}, "inputs": []},
      {"op": "null", "name": "fc_bias", "attr": {"__wd_mult__": "0.5"}, "inputs": []},
      {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "3"},
       "inputs": [[0, 0], [1, 0], [2, 0]]},
      {"op": "null", "name": "softmax_label", "inputs": []},
      {"op": "SoftmaxOutput", "name": "softmax", "param": {}, "inputs": [[3, 0], [4, 0]]}],
      "arg_nodes": [0, 1, 2, 4], "heads": [[5, 0]]})");
  ASSERT_THAT(net.status(), IsOk());
  Module mult(rt(), *net);
  ASSERT_THAT(mult.Bind(data->provide_data(), data->provide_label()), IsOk());
  ASSERT_THAT(mult.InitParams(Xavier(), {}, {}, 11), IsOk());
  const auto start = Values(mult);
  ASSERT_THAT(mult.Fit(data.get(), nullptr, Options(2)), IsOk());
  EXPECT_EQ(Values(mult).at("fc_weight"), start.at("fc_weight"));
  EXPECT_NE(Values(mult).at("fc_bias"), start.at("fc_bias"));
  ASSERT_NE(mult.optimizer(), nullptr);
  EXPECT_EQ(mult.optimizer()->lr_mult(), (std::map<int, double>{{0, 0.0}}));
  EXPECT_EQ(mult.optimizer()->wd_mult(), (std::map<int, double>{{1, 0.5}}));
}

// check_finite: a NaN in the data (sample 57: the third batch, update 3) fails training with
// the update and the first parameter whose gradient holds it; without the check the same
// run finishes with NaN weights.
TEST_F(ModuleTest, CheckFiniteReportsTheUpdateAndTheParameter) {
  for (bool check : {false, true}) {
    auto data = Data(false, 20, 57);
    Module mod(rt(), Net(), {.check_finite = check});
    const absl::Status fit = mod.Fit(data.get(), nullptr, Options(1));
    if (!check) {
      EXPECT_THAT(fit, IsOk());
      EXPECT_TRUE(std::isnan(Values(mod).at("fc1_weight")[0]));
      continue;
    }
    EXPECT_THAT(fit, StatusIs(absl::StatusCode::kFailedPrecondition,
                              AllOf(HasSubstr("update 3"), HasSubstr("'fc1_weight' (index 0)"))));
  }
}

// Mixed precision learns what float32 learns: bfloat16 without loss scaling, float16 with a
// static scale and with a dynamic one, whose first steps overflow (2^16 times this network's
// gradients is beyond float16) and are skipped while the scale halves, on the device.
TEST_F(ModuleTest, MixedPrecisionLearnsAndADynamicLossScaleSkipsItsOverflows) {
  struct Case {
    const char* what;
    graph::AmpOptions amp;
  };
  for (const Case& c : {Case{"bfloat16", {.dtype = DType::kBFloat16}},
                        Case{"float16, static scale", {.dtype = DType::kFloat16, .loss_scale = 128}},
                        Case{"float16, dynamic scale", {.dtype = DType::kFloat16, .dynamic_loss_scale = true}}}) {
    SCOPED_TRACE(c.what);
    auto train = Data(true);
    Module mod(rt(), Net(), {.amp = c.amp});
    ASSERT_THAT(mod.Fit(train.get(), nullptr, Options(25)), IsOk());
    EXPECT_GT(TestAccuracy(&mod), 0.9);
    auto params = mod.GetArgParams();
    ASSERT_THAT(params.status(), IsOk());
    EXPECT_EQ(params->at("fc1_weight").dtype(), DType::kFloat32);  // the master copy
    auto scaling = mod.loss_scaling();
    if (!c.amp.dynamic_loss_scale) {
      EXPECT_THAT(scaling.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
      continue;
    }
    ASSERT_THAT(scaling.status(), IsOk());
    EXPECT_LT(scaling->scale, kvstore::FusedUpdate::kInitialLossScale);
    EXPECT_GE(scaling->skipped_steps, 1);
    EXPECT_LE(scaling->skipped_steps, 12);  // of 250: the halvings from 2^16, no more
  }
  Module two(rt(), Net(), {.contexts = {Context::CPU(0), Context::CPU(1)},
                           .amp = graph::AmpOptions{.dtype = DType::kFloat16, .dynamic_loss_scale = true}});
  auto train = Data(true);
  EXPECT_THAT(two.Bind(train->provide_data(), train->provide_label()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dynamic loss scaling needs one device")));
}

// A float16 run with dynamic loss scaling resumed from a checkpoint mid-run goes on with the
// scale and its counts as the checkpoint left them: the parameters and the loss scaling at
// the end are the uninterrupted run's bit for bit. Without them the resumed run would start
// again from 2^16 and skip its overflows again: the test can fail.
TEST_F(ModuleTest, ADynamicLossScaleResumesWhereItsCheckpointLeftIt) {
  const graph::AmpOptions amp{.dtype = DType::kFloat16, .dynamic_loss_scale = true};
  const std::string dir = TempPrefix("amp-checkpoints");
  FitOptions options = Options(3);
  options.checkpoint_dir = dir;
  options.checkpoint_policy = {.every_batches = 1, .keep = 0};
  auto train = Data(true);
  Module full(rt(), Net(), {.amp = amp});
  ASSERT_OK(full.Fit(train.get(), nullptr, options));
  ASSERT_OK_AND_ASSIGN(const kvstore::FusedUpdate::LossScaling want, full.loss_scaling());
  ASSERT_OK_AND_ASSIGN(const LoadedCheckpoint checkpoint,
                       ReadCheckpoint(rt(), dir + "/" + CheckpointName(0, 5)));
  ASSERT_TRUE(checkpoint.manifest.has_loss_scaler());
  EXPECT_LT(checkpoint.manifest.loss_scaler().scale(), kvstore::FusedUpdate::kInitialLossScale);
  EXPECT_GE(checkpoint.manifest.loss_scaler().skipped_steps(), 1);

  auto resume = [&](const LoadedCheckpoint& from) {
    auto data = Data(true);
    auto resumed = std::make_unique<Module>(rt(), Net(), ModuleOptions{.amp = amp});
    EXPECT_THAT(resumed->Bind(data->provide_data(), data->provide_label()), IsOk());
    EXPECT_THAT(resumed->InitParams(Xavier(), from.arg_params, from.aux_params), IsOk());
    FitOptions rest = Options(3);
    rest.resume = &from;
    EXPECT_THAT(resumed->Fit(data.get(), nullptr, rest), IsOk());
    return resumed;
  };
  std::unique_ptr<Module> resumed = resume(checkpoint);
  EXPECT_EQ(Values(*resumed), Values(full)) << "bit-for-bit equality";
  ASSERT_OK_AND_ASSIGN(const kvstore::FusedUpdate::LossScaling got, resumed->loss_scaling());
  EXPECT_EQ(got.scale, want.scale);
  EXPECT_EQ(got.skipped_steps, want.skipped_steps);
  EXPECT_EQ(got.clean_steps, want.clean_steps);

  LoadedCheckpoint without = checkpoint;
  without.manifest.clear_loss_scaler();
  EXPECT_NE(Values(*resume(without)), Values(full));

  LoadedCheckpoint damaged = checkpoint;
  damaged.manifest.mutable_loss_scaler()->set_scale(3);
  auto data = Data(true);
  Module refused(rt(), Net(), {.amp = amp});
  ASSERT_OK(refused.Bind(data->provide_data(), data->provide_label()));
  FitOptions rest = Options(3);
  rest.resume = &damaged;
  EXPECT_THAT(refused.Fit(data.get(), nullptr, rest),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("loss_scaler"), HasSubstr("scale 3 is not a power of two"))));
}

// On a GPU with CUDA graphs Fit runs each batch as one captured step (forward, backward and
// the fused update: Module::TrainStep); the parameters are the operator-by-operator run's bit
// for bit (cuBLAS only, no algorithm search).
TEST_F(ModuleTest, AWholeCapturedStepOnTheGpuTrainsAsOperatorByOperator) {
  TESSERA_SKIP_WITHOUT_GPU();
  std::map<std::string, std::vector<float>> results[2];
  for (bool graphs : {false, true}) {
    auto data = Data(true);
    ModuleOptions options{.contexts = {Context::GPU(0)}};
    options.executor.cuda_graphs = graphs;
    Module mod(rt(), Net(), options);
    ASSERT_THAT(mod.Fit(data.get(), nullptr, Options(3)), IsOk());
    ASSERT_THAT(data->Reset(), IsOk());
    ASSERT_TRUE(data->Next().value());
    // One more batch: one captured step, or (nothing done) the three calls.
    EXPECT_THAT(mod.TrainStep(data->Value()), IsOkAndHolds(graphs)) << "graphs " << graphs;
    if (!graphs) {
      ASSERT_THAT(mod.Forward(data->Value(), true), IsOk());
      ASSERT_THAT(mod.Backward(), IsOk());
      ASSERT_THAT(mod.Update(), IsOk());
    }
    results[graphs] = Values(mod);
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(ModuleTest, Errors) {
  Module mod(rt(), Net(), {.data_names = {"image"}});
  auto data = Data(false);
  EXPECT_THAT(mod.Bind({{"image", Shape{20, 10}}}, {}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'image'")));
  Module ok(rt(), Net());
  ASSERT_THAT(ok.Bind(data->provide_data(), data->provide_label()), IsOk());
  EXPECT_THAT(ok.Update(), StatusIs(absl::StatusCode::kFailedPrecondition));
  auto wrong = FromVector<float>(rt(), Shape{3, 3}, std::vector<float>(9, 0));
  ASSERT_THAT(wrong.status(), IsOk());
  EXPECT_THAT(ok.InitParams(Xavier(), {{"fc1_weight", *wrong}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fc1_weight'")));
  ASSERT_THAT(ok.InitParams(Xavier()), IsOk());
  EXPECT_THAT(ok.InitOptimizer("local", "nesterov_sgd", {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Module::LoadCheckpoint(rt(), TempPrefix("missing"), 1).status(), ::testing::Not(IsOk()));
}

}  // namespace
}  // namespace tessera::train

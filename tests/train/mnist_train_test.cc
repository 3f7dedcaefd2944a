// End to end on the MNIST split that `./tessera data mnist` writes (8,000 train / 2,000
// test): the 784-128-64-10 MLP reaches 95% test accuracy within 10 epochs and LeNet 97.5%
// within 5, with SGD (lr 0.1, momentum 0.9) at batch 64 on the CPU, and on gpu(0) (the same
// targets; weights, optimizer and data on the device, with and without CUDA graphs; these
// skip without a GPU). `./tessera test` fetches the data and sets TESSERA_MNIST_DIR; run
// alone without it, the tests skip.
//
// The rate decays along a cosine to 0 over the run, with MXNet's MNIST-example weight decay
// (1e-4). At a fixed rate both models oscillate once they fit the 8,000 digits, and which side
// of the target their best epoch lands on depends on summation order: the MLP's best over
// seeds 1-5 was 94.45-95.10% (PyTorch 1.13 on this split: 94.55-95.05%). With the decay the
// MLP gave 95.35-95.95% over seeds 1-5 and LeNet 97.80-98.00% over seeds 1-4.
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "examples/models.h"
#include "gtest/gtest.h"
#include "io/mnist_iter.h"
#include "kvstore/lr_scheduler.h"
#include "tests/gpu_test_util.h"
#include "tests/ndarray/test_util.h"
#include "train/module.h"

namespace tessera::train {
namespace {

using tessera::testing::IsOk;

class MnistTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TESSERA_MNIST_DIR");
    if (dir == nullptr) GTEST_SKIP() << "TESSERA_MNIST_DIR is not set (./tessera test sets it)";
    dir_ = dir;
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  }

  std::unique_ptr<io::MNISTIter> Iter(bool train, bool flat) {
    io::MNISTIterOptions o;
    o.image = dir_ + (train ? "/train-images-idx3-ubyte" : "/t10k-images-idx3-ubyte");
    o.label = dir_ + (train ? "/train-labels-idx1-ubyte" : "/t10k-labels-idx1-ubyte");
    o.batch_size = 64;
    o.shuffle = train;
    o.flat = flat;
    o.silent = true;
    o.last_batch_handle = train ? "discard" : "pad";
    auto iter = io::MNISTIter::Create(owned_->get(), o);
    EXPECT_THAT(iter.status(), IsOk()) << "run ./tessera data mnist";
    return iter.ok() ? std::move(iter).value() : nullptr;
  }

  // The best test accuracy over `epochs` epochs of training `net`.
  // With `amp`, in mixed precision; `skipped` gets the steps a dynamic loss scale skipped
  // after the first 100.
  double Train(const graph::Symbol& net, bool flat, int epochs, double learning_rate,
               Context device = Context::CPU(), bool cuda_graphs = false,
               std::optional<graph::AmpOptions> amp = std::nullopt, int64_t* skipped = nullptr) {
    auto train = Iter(true, flat), test = Iter(false, flat);
    if (train == nullptr || test == nullptr) return 0;
    ModuleOptions module_options{.contexts = {device}, .amp = amp};
    module_options.executor.cuda_graphs = cuda_graphs;
    Module mod(owned_->get(), net, module_options);
    double best = 0;
    const int64_t updates = epochs * train->num_batches();
    FitOptions options{.num_epoch = epochs,
                       .optimizer = "sgd",
                       .optimizer_params = {{"learning_rate", absl::StrCat(learning_rate)},
                                            {"momentum", "0.9"},
                                            {"wd", "0.0001"}},
                       .lr_scheduler = [=]() -> absl::StatusOr<std::unique_ptr<kvstore::LRScheduler>> {
                         return kvstore::CosineScheduler::Create(updates, learning_rate);
                       },
                       .seed = 1};
    int64_t skipped_by_100 = 0;
    if (skipped != nullptr) {
      options.batch_end_callback = [&](const BatchEndParam& p) {
        if (p.epoch != 0 || p.nbatch != 100) return;
        auto scaling = mod.loss_scaling();
        EXPECT_THAT(scaling.status(), IsOk());
        if (scaling.ok()) skipped_by_100 = scaling->skipped_steps;
      };
    }
    options.epoch_end_callback = [&](int epoch, const auto& train_metric, const auto& eval_metric) {
      std::printf("epoch %d: train accuracy %.4f, test accuracy %.4f\n", epoch, train_metric[0].second,
                  eval_metric[0].second);
      best = std::max(best, eval_metric[0].second);
      return absl::OkStatus();
    };
    EXPECT_THAT(mod.Fit(train.get(), test.get(), options), IsOk());
    if (skipped != nullptr) {
      auto scaling = mod.loss_scaling();
      EXPECT_THAT(scaling.status(), IsOk());
      *skipped = scaling.ok() ? scaling->skipped_steps - skipped_by_100 : -1;
      std::printf("%lld steps skipped in the first 100\n", static_cast<long long>(skipped_by_100));
      steps_ = updates;
    }
    return best;
  }

  std::string dir_;
  std::unique_ptr<OwnedRuntime> owned_;
  int64_t steps_ = 0;  // of the last Train given `skipped`
};

TEST_F(MnistTrainTest, MlpReaches95PercentIn10Epochs) {
  auto net = examples::MlpWithWidths({128, 64});
  ASSERT_THAT(net.status(), IsOk());
  EXPECT_GE(Train(*net, /*flat=*/true, 10, 0.1), 0.95);
}

// LeNet reaches 97.5% in float32, and in mixed precision - bfloat16, and float16 with dynamic
// loss scaling - it ends within a point of its float32 run, with fewer than 0.1% of the steps after
// the first 100 skipped for an overflow (the first ones halve the scale from 2^16). A point,
// not less: the registry's MNIST has 2,000 test images, and over seeds 1-3 the float32 runs
// alone spread over 0.25 points and the mixed-precision ones (staged, and bfloat16 natively on
// AMX) lay up to 0.65 points either side of them; a broken cast or scaler costs many points
// or diverges.
TEST_F(MnistTrainTest, LeNetReaches97Point5PercentIn5EpochsAlsoInMixedPrecision) {
  auto net = examples::LeNet();
  ASSERT_THAT(net.status(), IsOk());
  const double float32 = Train(*net, /*flat=*/false, 5, 0.1);
  EXPECT_GE(float32, 0.975);
  const double bfloat16 = Train(*net, false, 5, 0.1, Context::CPU(), false, graph::AmpOptions{.dtype = DType::kBFloat16});
  EXPECT_NEAR(bfloat16, float32, 0.01);
  int64_t skipped = -1;
  const double float16 = Train(*net, false, 5, 0.1, Context::CPU(), false,
                               graph::AmpOptions{.dtype = DType::kFloat16, .dynamic_loss_scale = true}, &skipped);
  EXPECT_NEAR(float16, float32, 0.01);
  std::printf("float32 %.4f, bfloat16 %.4f, float16 %.4f (%lld of the %lld steps after the first 100 skipped)\n",
              float32, bfloat16, float16, static_cast<long long>(skipped), static_cast<long long>(steps_ - 100));
  EXPECT_GE(skipped, 0);
  EXPECT_LT(static_cast<double>(skipped), 0.001 * static_cast<double>(steps_ - 100));
}

TEST_F(MnistTrainTest, LeNetOnTheGpuReaches97Point5PercentIn5Epochs) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto net = examples::LeNet();
  ASSERT_THAT(net.status(), IsOk());
  EXPECT_GE(Train(*net, /*flat=*/false, 5, 0.1, Context::GPU(0)), 0.975);
}

TEST_F(MnistTrainTest, MlpOnTheGpuWithCudaGraphsReaches95PercentIn10Epochs) {
  TESSERA_SKIP_WITHOUT_GPU();
  auto net = examples::MlpWithWidths({128, 64});
  ASSERT_THAT(net.status(), IsOk());
  EXPECT_GE(Train(*net, /*flat=*/true, 10, 0.1, Context::GPU(0), /*cuda_graphs=*/true), 0.95);
}

}  // namespace
}  // namespace tessera::train

// The live progress line of `tessera train`.
#include "client/progress.h"

#include "gtest/gtest.h"

namespace tessera::client {
namespace {

TEST(ProgressLineTest, ABarWithPercentageWhenBatchesPerEpochAreKnown) {
  EXPECT_EQ(ProgressLine({.epoch = 2,
                          .num_epochs = 5,
                          .batch = 56,
                          .batches_per_epoch = 125,
                          .samples_per_second = 2400.4,
                          .metrics = "accuracy 0.9312"},
                         20),
            "epoch 2/5 [########------------]  44%  56/125 batches  2400 samples/s  accuracy 0.9312");
  EXPECT_EQ(ProgressLine({.epoch = 1, .num_epochs = 1, .batch = 0, .batches_per_epoch = 4}, 4),
            "epoch 1/1 [----]   0%  0/4 batches  0 samples/s");
  EXPECT_EQ(ProgressLine({.epoch = 3, .num_epochs = 3, .batch = 4, .batches_per_epoch = 4}, 4),
            "epoch 3/3 [####] 100%  4/4 batches  0 samples/s");
}

TEST(ProgressLineTest, OnePastTheEstimateStaysAtAFullBar) {
  EXPECT_EQ(ProgressLine({.epoch = 1, .num_epochs = 2, .batch = 5, .batches_per_epoch = 4}, 4),
            "epoch 1/2 [####] 100%  5/4 batches  0 samples/s");
}

TEST(ProgressLineTest, NoBarWhenBatchesPerEpochAreUnknown) {
  EXPECT_EQ(ProgressLine({.epoch = 1, .num_epochs = 3, .batch = 17, .samples_per_second = 99.6,
                          .metrics = "mse 0.5000"}),
            "epoch 1/3  batch 17  100 samples/s  mse 0.5000");
}

}  // namespace
}  // namespace tessera::client

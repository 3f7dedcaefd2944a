// The training task the multi-process tests share: a small synthetic 4-class problem, its
// split into per-worker batches, and Module::Fit on an MLP. The worker processes
// (dist_train_worker.cc) and the in-process reference run (dist_train_test.cc) call the
// same TrainTask, so a dist_sync run and its local reference differ only in the KVStore.
//
// Data: kSamples rows of kFeatures normal features from `data_seed` (identical in every
// process); the label is which of kClasses fixed directions scores highest. Split: with n
// workers at batch b, global batch t is rows [t*n*b, (t+1)*n*b) and worker w takes rows
// [t*n*b + w*b, t*n*b + (w+1)*b), so concatenating the workers' batches t in rank order
// gives the local run's batch t at batch n*b (no shuffling anywhere).
//
// Thread safety: plain functions; one thread drives one TrainTask call.
#ifndef TESSERA_TESTS_INTEGRATION_DIST_TRAIN_TASK_H_
#define TESSERA_TESTS_INTEGRATION_DIST_TRAIN_TASK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"

namespace tessera::integration {

inline constexpr int kSamples = 128;
inline constexpr int kFeatures = 20;
inline constexpr int kClasses = 4;
inline constexpr int kHidden = 32;  // fc1_weight: 32x20 = 640 elements

struct TaskOptions {
  std::string kvstore = "local";
  int num_workers = 1;  // how the rows are split...
  int rank = 0;         // ...and which part this process trains on
  int batch_size = 8;   // per worker
  int num_epoch = 2;
  // Rows of this many global batches at the end of each epoch are left out (uneven splits).
  int skip_last_batches = 0;
  double learning_rate = 0.1;
  double momentum = 0.9;
  uint64_t data_seed = 1;
  uint64_t init_seed = 7;
  // After every batch (epoch from 0, nbatch from 1), e.g. to hang a worker on purpose.
  std::function<void(int epoch, int nbatch)> batch_end;
  // After every epoch, with its training accuracy.
  std::function<void(int epoch, double accuracy)> epoch_end;
};

// Trains the MLP on this rank's rows and returns its parameters (CPU copies).
absl::StatusOr<std::map<std::string, NDArray>> TrainTask(const Runtime& rt,
                                                         const TaskOptions& options);

struct Score {
  double accuracy = 0;
  double cross_entropy = 0;
};
// `params` evaluated on all kSamples rows of `data_seed`'s data.
absl::StatusOr<Score> Evaluate(const Runtime& rt, const std::map<std::string, NDArray>& params,
                               uint64_t data_seed);

}  // namespace tessera::integration

#endif  // TESSERA_TESTS_INTEGRATION_DIST_TRAIN_TASK_H_

// Training throughput of a network through Module (forward + backward + SGD update per
// batch, as Fit runs them: Module::TrainStep where it can), shared by the benches that compare against it: train_bench (against PyTorch on the
// CPU), gpu_train_bench (against PyTorch on the same GPU) and io_bench (against the data
// iterators that feed it).
#ifndef TESSERA_BENCH_TRAINER_THROUGHPUT_H_
#define TESSERA_BENCH_TRAINER_THROUGHPUT_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/context.h"
#include "graph/amp.h"
#include "graph/symbol.h"
#include "io/data_iter.h"
#include "ndarray/runtime.h"
#include "ops/param.h"

namespace tessera::bench {

struct TrainerOptions {
  // Where the module binds, keeps its weights and runs the optimizer (kvstore "local" with one
  // device: the update runs where the weights are). The batches may live anywhere; batches
  // already on this device make the per-batch input copy a device-local one.
  Context context = Context::CPU();
  ops::KwArgs sgd_params = {{"learning_rate", "0.1"}, {"momentum", "0.9"}};
  // Batches trained before timing (first ones of the list, cycling); -1: one whole pass.
  int warmup_batches = -1;
  // Timed passes over all batches; the fastest counts.
  int passes = 3;
  // After timing, the first output must hold only finite values (FAILED_PRECONDITION
  // otherwise): a throughput of kernels that compute garbage is no figure.
  bool check_finite = false;
  // Mixed precision (graph/amp.h), as train::ModuleOptions::amp.
  std::optional<graph::AmpOptions> amp;
};

// Samples/s over `batches` (all of one shape), or the first error of binding, initializing
// or training (the module's own message).
absl::StatusOr<double> MeasureTrainerSamplesPerSecond(const Runtime& rt, const graph::Symbol& net,
                                                      const std::vector<io::DataBatch>& batches,
                                                      const TrainerOptions& options);

// The same on the CPU with the default options (one warm-up pass, best of three) and `amp`;
// CHECKs that training works.
double TrainerSamplesPerSecond(const Runtime& rt, const graph::Symbol& net,
                               const std::vector<io::DataBatch>& batches,
                               std::optional<graph::AmpOptions> amp = std::nullopt);

// `count` batches of seeded uniform [0, 1) data of `data_shape` (batch first) and labels
// in [0, 10) (integers stored as float), on `ctx`: the speed of training does not depend on
// the values. Drawn on the host from one generator, so every context gets the same numbers.
absl::StatusOr<std::vector<io::DataBatch>> MakeRandomBatches(const Runtime& rt,
                                                             const Shape& data_shape, int count,
                                                             Context ctx);
// The same on the CPU; CHECKs.
std::vector<io::DataBatch> RandomBatches(const Runtime& rt, const Shape& data_shape, int count);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_TRAINER_THROUGHPUT_H_

// dist_train_worker: one worker process of the multi-process tests. It trains
// dist_train_task.h's MLP on its share of the synthetic data through Module::Fit with the
// KVStore named by --kvstore; its rank, the worker count and the servers come from the
// environment (TESSERA_INDEX, TESSERA_NUM_WORKERS, TESSERA_PS_HOSTS: kvstore/cluster_spec.h),
// as KVStore::Create reads them. It writes its final parameters to --params_out and exits
// 0, or prints the error to stderr and exits 1.
//
// --hang_after_batches=K makes it write --hang_file after its K-th batch and then hang, so a
// test can kill or freeze it at a known point of training.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "core/status_macros.h"
#include "kvstore/cluster_spec.h"
#include "ndarray/serialization.h"
#include "tests/integration/dist_train_task.h"

ABSL_FLAG(std::string, kvstore, "dist_sync", "dist_sync, dist_async or a local type");
ABSL_FLAG(int, batch_size, 8, "rows per batch on this worker");
ABSL_FLAG(int, num_epoch, 2, "epochs");
ABSL_FLAG(int, skip_last_batches, 0, "global batches left out at the end of each epoch");
ABSL_FLAG(double, learning_rate, 0.1, "sgd learning rate");
ABSL_FLAG(double, momentum, 0.9, "sgd momentum");
ABSL_FLAG(uint64_t, data_seed, 1, "seed of the synthetic data (the same in every process)");
ABSL_FLAG(uint64_t, seed, 7, "seed of the parameter initialization");
ABSL_FLAG(std::string, params_out, "", "where to write the final parameters");
ABSL_FLAG(int, hang_after_batches, 0, "if > 0: hang after this many batches (0: never)");
ABSL_FLAG(std::string, hang_file, "", "written (\"hanging\\n\") when the worker starts to hang");

namespace {

absl::Status Run() {
  using tessera::kvstore::ResolveClusterSpec;
  ASSIGN_OR_RETURN(tessera::kvstore::ClusterSpec cluster, ResolveClusterSpec({}));
  ASSIGN_OR_RETURN(std::unique_ptr<tessera::OwnedRuntime> owned, tessera::OwnedRuntime::Create());
  tessera::integration::TaskOptions options;
  options.kvstore = absl::GetFlag(FLAGS_kvstore);
  options.num_workers = cluster.num_workers();
  options.rank = cluster.index;
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.num_epoch = absl::GetFlag(FLAGS_num_epoch);
  options.skip_last_batches = absl::GetFlag(FLAGS_skip_last_batches);
  options.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.momentum = absl::GetFlag(FLAGS_momentum);
  options.data_seed = absl::GetFlag(FLAGS_data_seed);
  options.init_seed = absl::GetFlag(FLAGS_seed);
  const int hang_after = absl::GetFlag(FLAGS_hang_after_batches);
  int done = 0;
  options.batch_end = [&](int, int) {
    if (++done != hang_after) return;
    std::ofstream(absl::GetFlag(FLAGS_hang_file)) << "hanging\n";
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // until killed
  };
  options.epoch_end = [](int epoch, double accuracy) {
    std::printf("epoch %d train-accuracy %.4f\n", epoch, accuracy);
    std::fflush(stdout);
  };
  using Params = std::map<std::string, tessera::NDArray>;
  ASSIGN_OR_RETURN(Params params, tessera::integration::TrainTask(owned->get(), options));
  return tessera::SaveArrays(absl::GetFlag(FLAGS_params_out), params);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "dist_train_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

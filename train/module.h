// Module: MXNet's Module API - a symbol bound for training on a list of devices, with
// parameters, an optimizer and a KVStore - and `Fit`, the training loop.
//
//   Module mod(rt, net, {.contexts = {Context::CPU()}});
//   RETURN_IF_ERROR(mod.Fit(train_iter.get(), test_iter.get(), {
//       .num_epoch = 10, .optimizer = "sgd",
//       .optimizer_params = {{"learning_rate", "0.1"}, {"momentum", "0.9"}}}));
//
// Data parallelism: each batch is split along its first dimension across the contexts
// (as MXNet's _split_input_slice), one executor per context; gradients are reduced and
// weights updated through the KVStore (local types; with one device and a local store the
// optimizer updates the executor's weights in place, as MXNet does). Gradient pushes of
// later parameters get higher priority, so the last layers' gradients, which Backward
// produces first, are reduced while Backward still runs.
//
// Reproducibility: parameters are initialized from `seed`, every batch reseeds the random
// generators with (seed, epoch, batch) (every epoch with (seed, epoch) when the network
// draws no random numbers), and iterators shuffle from (seed, epoch). A run
// resumed from a complete checkpoint (train/checkpoint.h: parameters, optimizer state,
// position, running metric) therefore continues the uninterrupted run bit for bit, on the
// CPU with fixed thread counts.
//
// Thread safety: one thread drives a Module.
#ifndef TESSERA_TRAIN_MODULE_H_
#define TESSERA_TRAIN_MODULE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/amp.h"
#include "graph/executor.h"
#include "graph/symbol.h"
#include "io/data_iter.h"
#include "kvstore/fused_update.h"
#include "kvstore/kvstore.h"
#include "kvstore/lr_scheduler.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "ndarray/params_file.h"
#include "ops/param.h"
#include "train/checkpoint.h"
#include "train/initializer.h"
#include "train/metric.h"

namespace tessera::train {

struct ModuleOptions {
  std::vector<std::string> data_names = {"data"};
  std::vector<std::string> label_names = {"softmax_label"};
  std::vector<Context> contexts = {Context::CPU()};
  // Parameters that are not trained (no gradient, never updated); Bind refuses a name the
  // network has no parameter of.
  std::vector<std::string> fixed_param_names;
  // How each device's executor runs (e.g. cuda_graphs).
  graph::ExecutorOptions executor;
  // Look for NaN and infinities in every gradient, on the device and without waiting for it
  // (kvstore::FusedUpdate::Options::check_finite): the update after the host sees one fails,
  // naming the update and the parameter. One device without a store only.
  bool check_finite = false;
  // Mixed-precision training (graph/amp.h): the executors run the network converted by
  // ConvertToMixedPrecision; parameters, gradients, the optimizer, checkpoints and saved
  // files stay float32, and the symbol saved is the network as given. A static loss_scale
  // is divided out of the gradients again through the optimizer's rescale_grad; dynamic
  // loss scaling (one device, no store) runs in the fused update, starting from 2^16 at
  // every Bind (the scale is not in checkpoints).
  std::optional<graph::AmpOptions> amp;
};

// What a batch callback sees.
struct BatchEndParam {
  int epoch = 0;
  int nbatch = 0;  // batches done in this epoch
  const EvalMetric* metric = nullptr;
};

struct FitOptions {
  int begin_epoch = 0;
  int num_epoch = 1;
  std::string eval_metric = "acc";
  std::string kvstore = "local";
  std::string optimizer = "sgd";
  ops::KwArgs optimizer_params = {{"learning_rate", "0.01"}};
  // Makes the learning-rate schedule (kvstore/lr_scheduler.h), e.g.
  // [] { return kvstore::FactorScheduler::Create(100, 0.5); }; none: a fixed rate.
  std::function<absl::StatusOr<std::unique_ptr<kvstore::LRScheduler>>()> lr_scheduler;
  // Where the optimizer runs with a KVStore: on the store (the parameter servers for dist_*;
  // the default), or on the workers with the store only summing gradients.
  std::optional<bool> update_on_kvstore;
  // Makes the store instead of KVStore::Create(kvstore) (which reads a dist cluster from
  // the environment): a worker daemon connects to the servers its job names.
  std::function<absl::StatusOr<std::unique_ptr<kvstore::KVStore>>(const std::string& type)>
      kvstore_factory;
  // Checked before every batch; true stops Fit with CANCELLED.
  std::function<bool()> should_stop;
  // Default: Xavier (uniform, avg, magnitude 3) with MXNet's naming conventions.
  std::shared_ptr<const Initializer> initializer;
  uint64_t seed = 0;
  // Called after every batch / epoch; an error from an epoch callback stops training.
  std::function<void(const BatchEndParam&)> batch_end_callback;
  std::function<absl::Status(int epoch, const std::vector<std::pair<std::string, double>>& train,
                             const std::vector<std::pair<std::string, double>>& eval)>
      epoch_end_callback;
  // When set, PREFIX-symbol.json once and PREFIX-NNNN.params/.states after every epoch.
  std::string checkpoint_prefix;
  ParamsFormat checkpoint_format = ParamsFormat::kTessera;
  // When set, complete checkpoints (train/checkpoint.h) into this folder at every epoch's
  // end and as `checkpoint_policy` says, written on a thread of their own; each manifest
  // carries `checkpoint_job_name`, `checkpoint_job` and `checkpoint_num_workers`.
  std::string checkpoint_dir;
  CheckpointPolicy checkpoint_policy;
  std::string checkpoint_job_name;
  std::string checkpoint_job;
  int checkpoint_num_workers = 1;
  // Continue from this checkpoint (its parameters already set with SetParams): Fit skips to
  // its position, restores the epoch's running metric and the history, and loads the
  // optimizer state. begin_epoch is ignored. A dist job resumes from the first worker's
  // checkpoint alone: the others pass none, and start from the servers' parameters at the
  // first worker's position (their running metric restarts at the resumed batch).
  const LoadedCheckpoint* resume = nullptr;
};

// Where training starts or resumes: before batch `batch` of epoch `epoch`.
struct TrainingPosition {
  int epoch = 0;
  int64_t batch = 0;
};

// How SetParams / LoadParams treat what the given parameters lack or add, as MXNet's
// Module.set_params.
struct SetParamsOptions {
  bool allow_missing = false;  // parameters not given get `initializer` (default: Xavier)
  bool allow_extra = false;    // arrays the network lacks are ignored
  std::shared_ptr<const Initializer> initializer;
  uint64_t seed = 0;
};

// The parameters of a checkpoint.
struct Checkpoint {
  graph::Symbol symbol;
  std::map<std::string, NDArray> arg_params, aux_params;
};

class Module {
 public:
  Module(const Runtime& rt, graph::Symbol symbol, ModuleOptions options = {});

  // Binds one executor per context for batches of `data`/`label` descriptions (batch size
  // first). INVALID_ARGUMENT naming a data or label name the symbol lacks, or a batch
  // smaller than the number of contexts.
  absl::Status Bind(const std::vector<io::DataDesc>& data, const std::vector<io::DataDesc>& label,
                    bool for_training = true);
  bool binded() const { return !execs_.empty(); }

  // Initializes every parameter and auxiliary state not in `arg_params`/`aux_params` with
  // `init`, from the runtime's generator reseeded with `seed`; a given array of the wrong
  // shape is INVALID_ARGUMENT naming it. Fit initializes only when this was not called.
  absl::Status InitParams(const Initializer& init, const std::map<std::string, NDArray>& arg_params = {},
                          const std::map<std::string, NDArray>& aux_params = {}, uint64_t seed = 0);
  // MXNet's Module.set_params: the parameters and auxiliary states from `arg_params` /
  // `aux_params`. Without allow_missing, network parameters not given are INVALID_ARGUMENT
  // naming them; without allow_extra, so are given arrays the network lacks.
  absl::Status SetParams(const std::map<std::string, NDArray>& arg_params,
                         const std::map<std::string, NDArray>& aux_params,
                         const SetParamsOptions& options);
  // SetParams from a parameter file of either format (ndarray/params_file.h), its arrays
  // split as MXNet's Module.load_params does: "arg:NAME" and "aux:NAME" by prefix, a plain
  // NAME (Gluon's save_parameters) as an auxiliary state when the network has one of that
  // name, else as an argument. Errors name the file.
  absl::Status LoadParams(const std::string& path, const SetParamsOptions& options);
  // Creates the optimizer (rescale_grad defaults to 1/batch, and 1/(batch * workers) for
  // dist_sync, as MXNet) and the KVStore. A dist store gets every parameter's initial value
  // (the first worker's wins) and the workers then pull it, so all start alike.
  absl::Status InitOptimizer(const std::string& kvstore, const std::string& optimizer,
                             const ops::KwArgs& optimizer_params,
                             std::unique_ptr<kvstore::LRScheduler> lr_scheduler = nullptr,
                             std::optional<bool> update_on_kvstore = std::nullopt,
                             const FitOptions* fit = nullptr);
  kvstore::Optimizer* optimizer() { return optimizer_; }
  // The store InitOptimizer made (kept until the module goes), or null: none.
  kvstore::KVStore* kvstore() { return kvstore_.get(); }

  absl::Status Forward(const io::DataBatch& batch, bool is_train);
  absl::Status Backward();
  absl::Status Update();
  // Forward, Backward and Update of one batch as ONE engine function - one CUDA graph once
  // warm (graph::Executor::TrainStep) - where that can be: one device without a store, its
  // executor capturing its passes (cuda_graphs on a GPU), InitOptimizer done. false (nothing
  // done) elsewhere: then call the three. Fit uses it.
  absl::StatusOr<bool> TrainStep(const io::DataBatch& batch);
  // Updates `metric` with this batch's labels and the outputs of the last Forward,
  // ignoring `pad` padding rows at the end.
  absl::Status UpdateMetric(EvalMetric* metric, const std::vector<NDArray>& labels, int pad);
  // With dynamic loss scaling, the scale and the steps skipped so far (waits for the steps
  // pushed); FAILED_PRECONDITION otherwise, or before the first update.
  absl::StatusOr<kvstore::FusedUpdate::LossScaling> loss_scaling() const;

  absl::Status Fit(io::DataIter* train, io::DataIter* eval, const FitOptions& options);
  // The metric over one pass of `iter` (reset first).
  absl::StatusOr<std::vector<std::pair<std::string, double>>> Score(io::DataIter* iter, EvalMetric* metric);
  // The outputs over one pass of `iter` (padding dropped), concatenated per output.
  absl::StatusOr<std::vector<NDArray>> Predict(io::DataIter* iter);

  // Copies of the current parameters and auxiliary states (from the first device).
  absl::StatusOr<std::map<std::string, NDArray>> GetArgParams() const;
  absl::StatusOr<std::map<std::string, NDArray>> GetAuxParams() const;

  // PREFIX-symbol.json, PREFIX-NNNN.params (keys "arg:NAME"/"aux:NAME" as MXNet) and, with
  // `save_optimizer_states`, PREFIX-NNNN.states.
  absl::Status SaveCheckpoint(const std::string& prefix, int epoch, bool save_optimizer_states,
                              ParamsFormat format = ParamsFormat::kTessera) const;
  static absl::StatusOr<Checkpoint> LoadCheckpoint(const Runtime& rt, const std::string& prefix, int epoch);
  // Loads PREFIX-NNNN.states into the optimizer (after InitOptimizer).
  absl::Status LoadOptimizerStates(const std::string& path);
  // The optimizer's state (the servers' for a dist store that updates), as the .states
  // files hold it, and its load (after InitOptimizer).
  absl::StatusOr<std::string> SaveOptimizerStateBytes() const;
  absl::Status LoadOptimizerStateBytes(const std::string& bytes);

  const std::vector<std::string>& param_names() const { return param_names_; }
  const std::vector<std::unique_ptr<graph::Executor>>& executors() const { return execs_; }

 private:
  // The dynamic loss scale of the first device's executor (graph::kAmpLossScale).
  NDArray LossScale() const;
  // [begin, end) rows of the batch for device `d`.
  std::pair<int64_t, int64_t> Slice(size_t d) const;
  // What a complete checkpoint at (epoch, batch) holds: host copies of the parameters, the
  // optimizer state, the running metric and the finished epochs in `history`.
  absl::StatusOr<CheckpointContents> CheckpointAt(
      int epoch, int64_t batch, const EvalMetric* running,
      const std::vector<CheckpointManifest::EpochMetrics>& history,
      const FitOptions& options) const;
  // The first dist worker's `mine`, on every worker (the servers carry it).
  // Update without a store: the optimizer on the one device's weights, fused.
  absl::Status UpdateInPlace();
  absl::Status MakeFusedUpdate();
  // Copies a batch's data and labels into the executors' inputs.
  absl::Status LoadBatch(const io::DataBatch& batch);
  absl::StatusOr<TrainingPosition> ShareStart(TrainingPosition mine);
  // A replacement of a lost dist worker (KVStore::rejoining): where it continues, from the
  // run's `start` and `batches_per_epoch` of its data part and how far its predecessor got.
  absl::StatusOr<TrainingPosition> RejoinPosition(TrainingPosition start,
                                                  int64_t batches_per_epoch) const;
  // PREFIX-symbol.json, PREFIX-NNNN.params and .states (SaveCheckpoint's files) from
  // `contents`.
  absl::Status WriteEpochFiles(const std::string& prefix, int epoch,
                               const CheckpointContents& contents) const;
  // Every executor's auxiliary states, executor by executor.
  std::vector<NDArray> AuxArrays() const;

  Runtime rt_;
  graph::Symbol symbol_;
  ModuleOptions options_;
  std::vector<std::string> param_names_, aux_names_;
  // Positions in ListArguments (the executors' argument order): of each parameter, and of
  // each data or label name the network reads.
  std::vector<size_t> param_position_;
  std::map<std::string, size_t> input_position_;
  std::vector<std::unique_ptr<graph::Executor>> execs_;
  int64_t batch_size_ = 0;
  bool for_training_ = false;
  bool params_initialized_ = false;
  std::unique_ptr<kvstore::KVStore> kvstore_;
  std::unique_ptr<kvstore::Optimizer> local_optimizer_;  // when the workers update
  // One device without a store: every parameter's update in one push, made at the first.
  std::unique_ptr<kvstore::FusedUpdate> fused_update_;
  // The update as the end of a TrainStep's pass, and the fused update's generation it is of.
  graph::Executor::StepEpilogue step_epilogue_;
  int64_t epilogue_generation_ = -1;
  bool update_on_kvstore_ = false;
  kvstore::Optimizer* optimizer_ = nullptr;
  std::vector<int> trained_;  // indices into param_names_ of parameters with gradients
  int shared_starts_ = 0;     // ShareStart's keys follow the parameters' (one per Fit)
  // Where a replacement's predecessor got (KVStore::Rejoin), until Fit continues from there.
  std::optional<kvstore::KVStore::RejoinPoint> rejoin_;
};

}  // namespace tessera::train

#endif  // TESSERA_TRAIN_MODULE_H_

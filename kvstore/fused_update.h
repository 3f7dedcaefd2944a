// FusedUpdate: one optimizer step of a fixed set of parameters on one device as one engine
// push - on a GPU one kernel launch for all of them plus one that counts the step, as MXNet's
// multi_sgd_mom_update and apex's multi-tensor apply - instead of a push and a launch per
// parameter. Each parameter ends with Optimizer::Update's values bit for bit: the same
// kernels (internal/update_kernel.h) with the same hyperparameters.
//
//   ASSIGN_OR_RETURN(auto fused, FusedUpdate::Create(optimizer, indices, weights, grads));
//   for (each batch) { forward/backward; RETURN_IF_ERROR(fused->Step()); }
//
// The learning rate, weight decay and Adam's bias correction of a step are the optimizer's,
// computed on the host as for Update, but ahead: the rows of the next `lookahead` steps go to
// the device at once, and the device counts the steps it has done and picks its row itself.
// A step's launches therefore have arguments that never change, and with cuda_graphs they
// are captured once into a CUDA graph (engine/stream_graph.h) and replayed: nothing in a step
// needs the host. The optimizer's bookkeeping (update counts, num_update, the scheduler's
// state) advances on the host with each Step exactly as for Update, so learning_rate(),
// SaveState and checkpoints see the same optimizer. A change to the optimizer
// (SetLearningRate, the multipliers, the scheduler, LoadState) is taken up at the next Step,
// which recomputes its rows and state pointers; an Update of one of these indices on its own
// makes the next Step FAILED_PRECONDITION (the set is updated together). On the CPU the
// same table lives in host memory and internal/fused_update_host.h runs the GPU's launches
// as loops, so the CPU's tests check the rows, windows and counters the GPU uses.
//
// With check_finite every gradient is checked for NaN and infinities on the device (or in the
// CPU's push); the first step that had one is reported by a later Step and by Check.
//
// Thread safety: Step may be called from any thread, one call at a time per FusedUpdate.
#ifndef TESSERA_KVSTORE_FUSED_UPDATE_H_
#define TESSERA_KVSTORE_FUSED_UPDATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context.h"
#include "engine/engine.h"
#include "engine/stream_graph.h"
#include "kvstore/internal/fused_update_table.h"
#include "kvstore/internal/update_kernel.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"

namespace tessera::kvstore {

class FusedUpdate {
 public:
  struct Options {
    // Replay a GPU step as a CUDA graph (unless TESSERA_CUDA_GRAPHS=0, as executors).
    bool cuda_graphs = engine::StreamGraph::EnabledByEnv();
    // Steps whose hyperparameters go to the device at once (>= 1).
    int64_t lookahead = 1024;
    // Look for NaN and infinities in every gradient of every step, on the device and without
    // waiting for it: the first step that had one fails the Step call after it sees it (one
    // or two steps later on a GPU) and Check, naming the update and the lowest parameter.
    bool check_finite = false;
    // The parameters' names, per index given to Create, for those messages (optional).
    std::vector<std::string> names;
    // Dynamic loss scaling (internal/loss_scaler.h): a (1,) float32 array on the weights'
    // device holding the scale the loss's gradient was multiplied by (graph/amp.h). Each
    // step divides the gradients by it in place, skips the update when one holds a NaN or an
    // infinity, and adjusts it. A skipped step is no update (MXNet's AMP skips the trainer's
    // update): it advances neither the learning-rate schedule nor Adam's step; the device
    // takes the next step with the skipped one's row. The host cannot know which steps were
    // skipped without waiting, so the optimizer's counts follow the device's at each sync:
    // when a window of rows is used up (once per `lookahead` steps), at Check and Sync.
    // Not with check_finite; CPU only so far.
    NDArray loss_scale;
  };

  // Where a dynamic loss scale starts (2^16, as MXNet and PyTorch).
  static constexpr float kInitialLossScale = internal::kInitialLossScale;

  // The loss scale, the steps skipped for an overflow so far, and the clean steps since the
  // scale last changed (waits for the pushed steps).
  struct LossScaling {
    float scale = 0;
    int64_t skipped_steps = 0;
    int64_t clean_steps = 0;
  };

  // weights[i] is updated by grads[i] as parameter indices[i], as Optimizer::Update takes
  // them (float32, same shape, the weight's device); all on one device; indices distinct;
  // every index updated as often as the others so far (a set updated together). States are
  // made here for indices without them. INVALID_ARGUMENT naming the index otherwise;
  // FAILED_PRECONDITION for a GPU without CUDA in the build. `optimizer` must outlive this.
  static absl::StatusOr<std::unique_ptr<FusedUpdate>> Create(Optimizer* optimizer,
                                                             std::vector<int> indices,
                                                             std::vector<NDArray> weights,
                                                             std::vector<NDArray> grads,
                                                             Options options);
  static absl::StatusOr<std::unique_ptr<FusedUpdate>> Create(Optimizer* optimizer,
                                                             std::vector<int> indices,
                                                             std::vector<NDArray> weights,
                                                             std::vector<NDArray> grads) {
    return Create(optimizer, std::move(indices), std::move(weights), std::move(grads), Options());
  }
  ~FusedUpdate();
  FusedUpdate(const FusedUpdate&) = delete;
  FusedUpdate& operator=(const FusedUpdate&) = delete;

  // Pushes one update of every parameter (one engine push; `priority` goes to it). Returns
  // at once; nothing is counted when the engine refuses the push. FAILED_PRECONDITION when
  // the parameters' update counts came apart (one of them was updated on its own).
  absl::Status Step(int priority = 0);

  // Waits for the pushed steps and checks the device's counters: INTERNAL when a launch
  // found no row for its step (a bug: that update did nothing) or the device counted other
  // than the host; with check_finite, FAILED_PRECONDITION when a gradient held a NaN or an
  // infinity. Syncs first (below).
  absl::Status Check();
  // With dynamic loss scaling: waits for the pushed steps and brings the optimizer's
  // bookkeeping (update counts, num_update, the scheduler) to the updates the device applied
  // - what SaveState must see, and LoadState must not race (Module calls it before both).
  // Without: nothing to do (the host counts each step as it pushes it).
  absl::Status Sync();

  // FAILED_PRECONDITION without Options::loss_scale.
  absl::StatusOr<LossScaling> loss_scaling() const;
  // Continues from `state` (a checkpoint's loss_scaling()): the scale into Options::loss_scale
  // now, the counts with the next step. INVALID_ARGUMENT naming the field for a scale that is
  // not a power of two in [1, 2^24] or counts out of range; FAILED_PRECONDITION without
  // Options::loss_scale.
  absl::Status RestoreLossScaling(const LossScaling& state);

  // The same step split for running it inside another engine function (a training step's
  // graph, graph::Executor::TrainStep): Prepare does a step's host side (and pushes what the
  // table needs written, when it does); DeviceWork is the step's device side, to run after
  // Prepare in a function that reads read_vars() and writes write_vars() (never its own
  // graph: the caller's captures it, options.cuda_graphs is Step's). Both describe
  // the state of the last refresh: when generation() changes, take them again.
  absl::Status Prepare(int priority = 0);
  std::function<absl::Status(engine::RunContext)> DeviceWork() const;
  const std::vector<engine::VarHandle>& read_vars() const { return read_vars_; }
  std::vector<engine::VarHandle> write_vars() const;
  int64_t generation() const;

  Context ctx() const { return ctx_; }
  // Whether GPU steps now replay a captured graph.
  bool captured() const;

 private:
  struct Device;  // the GPU's buffer, its layout and the graph
  struct Nonfinite;  // what the finiteness check found, as the host last saw it

  // FAILED_PRECONDITION naming the first update and parameter with a NaN or an infinity in
  // its gradient, as far as the host has seen; OK without one (or without the check).
  absl::Status NonfiniteStatus() const;

  FusedUpdate(Optimizer* optimizer, std::vector<int> indices, std::vector<NDArray> weights,
              std::vector<NDArray> grads, Options options);
  // Re-reads the state arrays, counts and hyperparameter groups from the optimizer.
  absl::Status RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  // The kernels of update `t` per group, with `base_lr` before the multipliers (a row).
  std::vector<internal::UpdateKernel> KernelsLocked(int64_t t, double base_lr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  // The device rows of updates first .. first + rows - 1.
  absl::StatusOr<std::string> RowsLocked(int64_t first, int64_t rows) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  // The update a window of rows computed now starts at.
  int64_t NextUpdateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  bool scaled() const { return !options_.loss_scale.is_none(); }
  // The device's counters, once the pushed steps are done.
  absl::StatusOr<internal::FusedCounters> DeviceCounters() const;
  absl::Status SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  // Whether the optimizer changed since the last refresh, or an index was updated apart.
  bool StaleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  // One step's host side: the bookkeeping, and what must be written into the device's
  // table first (offset, bytes): rows when the step leaves the window, the tables after a
  // refresh. FinishStepLocked keeps it when the push went, undoes it when it did not.
  struct Pending {
    int64_t old_num_update = 0;
    std::vector<std::pair<size_t, std::string>> uploads;
    bool in_window = true;
    int64_t rows = 0;
  };
  absl::StatusOr<Pending> BeginStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  absl::Status FinishStepLocked(const Pending& p, const absl::Status& pushed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(optimizer_->mu_);
  std::function<absl::Status(engine::RunContext)> Uploader(
      std::vector<std::pair<size_t, std::string>> uploads) const;

  Optimizer* const optimizer_;
  const std::vector<int> indices_;
  const std::vector<NDArray> weights_;
  const std::vector<NDArray> grads_;
  const Options options_;
  const Context ctx_;
  internal::FusedKind kind_ = internal::FusedKind::kSgd;
  bool clip_ = false;  // clip_gradient >= 0 (fixed at creation)

  // Host copies of what the device reads; refreshed with the optimizer's generation.
  std::vector<internal::FusedTensor> tensors_;
  std::vector<internal::FusedChunk> chunks_;
  std::vector<double> group_lr_mult_, group_wd_mult_;
  std::vector<int> group_index_;  // one index of each group, for messages
  std::vector<Optimizer::Slot*> slots_;  // the optimizer's, per index
  std::vector<engine::VarHandle> read_vars_, mutate_vars_;
  int64_t generation_ = -1;
  int64_t refreshes_ = 0;  // RefreshLocked calls: what the variables and pointers belong to
  int64_t steps_ = 0;  // updates of every index so far (with loss scaling: as last synced)
  int64_t launched_ = 0;  // with loss scaling: steps pushed since the last sync
  bool tables_stale_ = true;  // the device's tensors and counters need writing
  bool scaler_stale_ = true;  // the device's loss scaler state needs writing
  internal::LossScalerState scaler_start_;  // what it is written with
  // The updates whose rows the device holds, and num_update - steps when computed.
  int64_t window_first_ = 1;
  int64_t window_rows_ = 0;
  int64_t window_offset_ = 0;
  std::shared_ptr<Device> device_;
  std::shared_ptr<Nonfinite> nonfinite_;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_FUSED_UPDATE_H_

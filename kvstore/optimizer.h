// Optimizer: updates a weight from its gradient, MXNet 1.x style. Created by name with
// string parameters (ops/param.h parses them):
//
//   "sgd"      learning_rate=0.01 momentum=0 wd=0 rescale_grad=1 clip_gradient=-1
//   "adam"     learning_rate=0.001 beta1=0.9 beta2=0.999 epsilon=1e-8 wd rescale_grad
//              clip_gradient
//   "rmsprop"  learning_rate=0.001 gamma1=0.9 gamma2=0.9 epsilon=1e-8 centered=false wd
//              rescale_grad clip_gradient clip_weights=-1
//   "adagrad"  learning_rate=0.01 eps=1e-7 wd rescale_grad clip_gradient
//
// A clip bound < 0 turns that clipping off. The update formulas are MXNet's exactly (see
// internal/update_kernels.h); Adam folds its bias correction into the rate as MXNet's Python
// Adam does: lr * sqrt(1 - beta2^t) / (1 - beta1^t), t being the weight's update count.
// A bad parameter is INVALID_ARGUMENT naming the optimizer and the parameter.
//
// Bookkeeping follows MXNet's Optimizer: each Update counts one update of its weight, and
// num_update is the largest count of any weight; the rate used is the scheduler's rate at
// num_update (or the fixed learning rate), times the index's lr_mult; the weight decay is
// wd times the index's wd_mult. State (momentum, Adam's moments, ...) and the update count
// are kept per (index, device of the weight): several device copies of one parameter -
// what the allreduce KVStores update - each have their own, as MXNet gives every device's
// copy an index of its own. Hence one weight per (index, device).
//
// Arrays: weight and grad are float32 of one shape on one device; the state lives beside
// the weight. The update is a single engine push (weight and state mutated, grad read) and
// Update returns at once: a host loop for a CPU weight, a device kernel on the run
// context's stream for a GPU weight, with the same float32 arithmetic (internal/
// update_kernels_gpu.h). A GPU weight in a build without CUDA is FAILED_PRECONDITION.
//
// Thread safety: every method may be called from any thread; updates of one weight are
// pushed in the order their Update calls take the internal lock.
#ifndef TESSERA_KVSTORE_OPTIMIZER_H_
#define TESSERA_KVSTORE_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context.h"
#include "core/mutex.h"
#include "kvstore/internal/update_kernel.h"
#include "kvstore/lr_scheduler.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "ops/param.h"

namespace tessera::kvstore {

class Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const std::string& name,
                                                           const ops::KwArgs& params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "sgd", "adam", "rmsprop", "adagrad".
  const std::string& name() const { return name_; }
  // The parameters given to Create, so the optimizer can be re-created elsewhere (the
  // parameter servers run a copy of the trainer's).
  const ops::KwArgs& params() const { return params_; }

  // Pushes one update of `weight` by `grad` for parameter `index`, creating the state on the
  // first update of (index, weight's device). `priority` goes to the engine push. Returns at
  // once; INVALID_ARGUMENT (nothing pushed, nothing counted) for a none array, a dtype other
  // than float32, differing shapes or devices, or a weight whose shape differs from the
  // state already kept for (index, device); FAILED_PRECONDITION for a GPU weight in a build
  // without CUDA, or (from the engine) on a GPU this process does not see.
  absl::Status Update(int index, const NDArray& weight, const NDArray& grad, int priority = 0);
  // Update's checks alone, so a caller updating several copies can check all of them first.
  absl::Status CheckUpdate(int index, const NDArray& weight, const NDArray& grad) const;

  // The fixed learning rate. With a scheduler set this is FAILED_PRECONDITION, as MXNet's
  // set_learning_rate refuses then (the scheduler decides the rate).
  absl::Status SetLearningRate(double lr);
  // The rate for the next updates before lr_mult: scheduler(num_update) or the fixed rate.
  double learning_rate() const;
  // Per-index multipliers (the lr_mult / wd_mult attributes); indexes not listed get 1.
  void SetLrMult(std::map<int, double> lr_mult);
  void SetWdMult(std::map<int, double> wd_mult);
  std::map<int, double> lr_mult() const;
  std::map<int, double> wd_mult() const;
  // Replaces the scheduler (null removes it). When the optimizer was created with an explicit
  // learning_rate, the scheduler restarts from it (SetBaseLr), as MXNet's constructor does.
  void SetLrScheduler(std::unique_ptr<LRScheduler> scheduler);
  // The scheduler (owned by the optimizer; null without one). Its name() and config() are
  // fixed at creation, so reading them needs no lock; do not call it while updates run.
  const LRScheduler* lr_scheduler() const;

  int64_t num_update() const;
  // Updates counted for (index, device); 0 before the first.
  int64_t update_count(int index, Context ctx = Context::CPU()) const;

  // Every state array, update count, num_update, the fixed rate and the scheduler's state,
  // so that an optimizer created with the same parameters and LoadState'd continues bit for
  // bit. Waits for pending updates (an update that failed is returned here). Not saved:
  // the hyperparameters given to Create, lr_mult and wd_mult.
  //
  // Format, little-endian: "TSROPTST", uint32 version = 1, string optimizer name, float64
  // learning rate, int64 num_update, uint32 has_scheduler [string scheduler name, uint32 n,
  // n float64], uint32 slots, per slot {int32 index, int32 device type, int32 device id,
  // int64 count, uint32 states}, then uint64 length + a Tessera array file
  // (ndarray/serialization.h) with every slot's states in slot order. A string is a uint32
  // length and its bytes.
  absl::StatusOr<std::string> SaveState() const;
  // Replaces every state, count and the schedule with `bytes`' (arrays made with `rt` on the
  // devices they were saved from). INVALID_ARGUMENT when they come from another optimizer
  // or scheduler or from other parameters (a state count that does not match), DATA_LOSS
  // when truncated or corrupt; on any error nothing changes.
  absl::Status LoadState(const Runtime& rt, const std::string& bytes);

  // One parameter's slot on the CPU (its states and update count) alone, for a parameter
  // server's backup (docs/replication.md): "" before the index's first update, else int64
  // count, then a Tessera array file of the states. Waits for the index's pending update.
  absl::StatusOr<std::string> SaveSlot(int index) const;
  // Replaces index's CPU slot with SaveSlot's bytes ("": none) and raises num_update to its
  // count. INVALID_ARGUMENT for another optimizer's state count, DATA_LOSS when corrupt;
  // on any error nothing changes.
  absl::Status LoadSlot(const Runtime& rt, int index, const std::string& bytes);

 protected:
  // What one update uses, MXNet's _get_lr/_get_wd after _update_count.
  struct Step {
    double lr = 0;
    double wd = 0;
    int64_t t = 0;  // this weight's update count, this update included
    int index = 0;  // the parameter, for error messages
  };

  Optimizer(std::string name, double learning_rate, bool learning_rate_given, double wd)
      : name_(std::move(name)), lr_(learning_rate), lr_given_(learning_rate_given), wd_(wd) {}

  // State arrays per weight (shaped and placed like the weight, zero at first).
  virtual int NumStates() const = 0;
  // The kernel and hyperparameters of one update (the same for every element).
  virtual internal::UpdateKernel KernelFor(const Step& step) const = 0;

 private:
  friend class FusedUpdate;  // runs KernelFor over many parameters at once

  // Pushes KernelFor(step): one PushSync mutating weight and states, reading grad.
  absl::Status PushUpdate(const Step& step, const NDArray& weight, const NDArray& grad,
                          const std::vector<NDArray>& states, int priority) const;
  // (index, device type, device id): ordered, so SaveState's output is deterministic.
  using SlotKey = std::tuple<int, int, int>;
  struct Slot {
    std::vector<NDArray> states;
    int64_t count = 0;
  };
  static SlotKey KeyOf(int index, Context ctx) {
    return {index, static_cast<int>(ctx.type), ctx.id};
  }
  absl::Status CheckUpdateLocked(int index, const NDArray& weight, const NDArray& grad) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double BaseLrLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot of (index, weight's device), made with zero states if there is none (*created).
  absl::StatusOr<std::map<SlotKey, Slot>::iterator> SlotLocked(int index, const NDArray& weight,
                                                               bool* created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  ops::KwArgs params_;  // set once by Create
  // Mutex (a std::mutex), not absl::Mutex: Debian's Abseil is not built with ThreadSanitizer,
  // which then cannot see absl::Mutex's synchronization (the KVStore tests run under TSan).
  mutable Mutex mu_;
  double lr_ ABSL_GUARDED_BY(mu_);
  const bool lr_given_;
  const double wd_;
  // Called with num_update; stateful, hence mutable for learning_rate() const.
  mutable std::unique_ptr<LRScheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  std::map<int, double> lr_mult_ ABSL_GUARDED_BY(mu_);
  std::map<int, double> wd_mult_ ABSL_GUARDED_BY(mu_);
  int64_t num_update_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<SlotKey, Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Counts the changes a fused update's precomputed steps and state pointers depend on (the
  // rate, the multipliers, the scheduler, loaded state).
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_OPTIMIZER_H_

// Learning-rate schedulers, as MXNet 1.x's python/mxnet/lr_scheduler.py: a scheduler maps
// the optimizer's num_update (the largest update count of any weight) to a learning rate.
//
//   FactorScheduler      lr = base_lr * factor^floor((num_update - 1) / step), never below
//                        stop_factor_lr
//   MultiFactorScheduler lr = base_lr * factor^(number of steps[i] < num_update)
//   CosineScheduler      lr = final_lr + (base_lr - final_lr) * (1 + cos(pi * (n - warmup)
//                        / (max_update - warmup))) / 2 for n <= max_update, then final_lr
//
// Every scheduler can warm up first: for num_update < warmup_steps the rate goes linearly
// from warmup_begin_lr to base_lr ("linear"), or stays at warmup_begin_lr ("constant").
//
// Like MXNet's, the schedulers are stateful (Factor and MultiFactor decay base_lr in place
// as num_update passes each step), so SaveState/LoadState carry that state for a resume that
// is bit-identical. Create functions check their arguments and return INVALID_ARGUMENT naming
// the scheduler and the argument. Not thread-safe: the optimizer that owns one serializes
// the calls.
#ifndef TESSERA_KVSTORE_LR_SCHEDULER_H_
#define TESSERA_KVSTORE_LR_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessera::kvstore {

enum class WarmupMode { kLinear, kConstant };

struct Warmup {
  int64_t steps = 0;  // updates 0 .. steps-1 are warm-up
  double begin_lr = 0;
  WarmupMode mode = WarmupMode::kLinear;
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;

  // The learning rate for the update numbered `num_update` (1 for the first update).
  // Calls must come with non-decreasing num_update, as the optimizer makes them.
  double operator()(int64_t num_update);

  // "factor", "multifactor", "cosine".
  virtual const char* name() const = 0;
  double base_lr() const { return base_lr_; }
  // Restarts the schedule from `lr` (what an optimizer's explicit learning_rate does). Unlike
  // MXNet, which only overwrites base_lr, this also moves the warm-up target and the cosine
  // starting point, so the whole schedule follows.
  virtual void SetBaseLr(double lr);

  // The arguments it was created with, as CreateLRScheduler takes them (name() and these
  // re-create it in another process: the parameter servers run the trainer's schedule).
  const std::vector<std::pair<std::string, std::string>>& config() const { return config_; }

  // A scheduler that continues from this one's state as this one would (for computing rates
  // ahead without moving this one).
  absl::StatusOr<std::unique_ptr<LRScheduler>> Clone() const;

  // The mutable state, and its restoration; LoadState rejects a vector of another length.
  virtual std::vector<double> SaveState() const;
  virtual absl::Status LoadState(absl::Span<const double> state);

 protected:
  LRScheduler(double base_lr, Warmup warmup)
      : base_lr_(base_lr), warmup_(warmup), warmup_final_lr_(base_lr) {}
  // Checks the arguments shared by every scheduler; `who` names the scheduler in errors.
  static absl::Status CheckCommon(const char* who, double base_lr, const Warmup& warmup);
  // The rate after warm-up.
  virtual double Scheduled(int64_t num_update) = 0;

  double base_lr_;
  std::vector<std::pair<std::string, std::string>> config_;  // set by each Create

 private:
  Warmup warmup_;
  double warmup_final_lr_;
};

class FactorScheduler : public LRScheduler {
 public:
  static absl::StatusOr<std::unique_ptr<FactorScheduler>> Create(int64_t step, double factor = 1,
                                                                 double stop_factor_lr = 1e-8,
                                                                 double base_lr = 0.01,
                                                                 Warmup warmup = {});
  const char* name() const override { return "factor"; }
  std::vector<double> SaveState() const override;
  absl::Status LoadState(absl::Span<const double> state) override;

 private:
  FactorScheduler(int64_t step, double factor, double stop_factor_lr, double base_lr, Warmup warmup)
      : LRScheduler(base_lr, warmup),
        step_(step),
        factor_(factor),
        stop_factor_lr_(stop_factor_lr) {}
  double Scheduled(int64_t num_update) override;

  int64_t step_;
  double factor_;
  double stop_factor_lr_;
  int64_t count_ = 0;  // the last step boundary passed
};

class MultiFactorScheduler : public LRScheduler {
 public:
  // `steps`: strictly increasing, each >= 1.
  static absl::StatusOr<std::unique_ptr<MultiFactorScheduler>> Create(std::vector<int64_t> steps,
                                                                      double factor = 1,
                                                                      double base_lr = 0.01,
                                                                      Warmup warmup = {});
  const char* name() const override { return "multifactor"; }
  std::vector<double> SaveState() const override;
  absl::Status LoadState(absl::Span<const double> state) override;

 private:
  MultiFactorScheduler(std::vector<int64_t> steps, double factor, double base_lr, Warmup warmup)
      : LRScheduler(base_lr, warmup), steps_(std::move(steps)), factor_(factor) {}
  double Scheduled(int64_t num_update) override;

  std::vector<int64_t> steps_;
  double factor_;
  size_t next_step_ = 0;  // index of the first step not passed yet
};

class CosineScheduler : public LRScheduler {
 public:
  // warmup_steps < max_update.
  static absl::StatusOr<std::unique_ptr<CosineScheduler>> Create(
      int64_t max_update, double base_lr = 0.01, double final_lr = 0, int64_t warmup_steps = 0,
      double warmup_begin_lr = 0, WarmupMode warmup_mode = WarmupMode::kLinear);
  const char* name() const override { return "cosine"; }
  void SetBaseLr(double lr) override;
  std::vector<double> SaveState() const override;
  absl::Status LoadState(absl::Span<const double> state) override;

 private:
  CosineScheduler(int64_t max_update, double base_lr, double final_lr, Warmup warmup)
      : LRScheduler(base_lr, warmup),
        base_lr_orig_(base_lr),
        max_update_(max_update),
        final_lr_(final_lr),
        max_steps_(max_update - warmup.steps) {}
  double Scheduled(int64_t num_update) override;

  double base_lr_orig_;
  int64_t max_update_;
  double final_lr_;
  int64_t max_steps_;
};

// A scheduler by name ("factor", "multifactor", "cosine") from string arguments named as
// the Create functions' parameters (warmup_steps, warmup_begin_lr, warmup_mode=linear|
// constant; multifactor's steps as "10,20,30"); omitted ones take their defaults.
// INVALID_ARGUMENT naming the scheduler and the argument.
absl::StatusOr<std::unique_ptr<LRScheduler>> CreateLRScheduler(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& args);

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_LR_SCHEDULER_H_

// FusedUpdate (see fused_update.h).
#include "kvstore/fused_update.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "kvstore/internal/fused_update_host.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_status.h"
#include "kvstore/internal/update_kernels_gpu.h"
#endif

namespace tessera::kvstore {

using internal::FusedChunk;
using internal::FusedCounters;
using internal::FusedTensor;
using internal::FusedWindow;
using internal::UpdateKernel;

// The table's buffer on the parameters' device: [counters | window | hyperparameter rows |
// tensors | chunks], the window right before its rows so one copy writes both.
struct FusedUpdate::Device {
  NDArray buffer;  // uint8
  size_t counters_at = 0, window_at = 0, hypers_at = 0, tensors_at = 0, chunks_at = 0, scaler_at = 0;
  size_t hyper_size = 0;     // bytes of one hyperparameter struct
  size_t hyper_capacity = 0; // bytes for rows
  internal::FusedTable table;
  engine::StreamGraph graph{"fused optimizer update"};
  // Page-locked host copy of the counters, written after every GPU step (check_finite).
  FusedCounters* seen = nullptr;

  ~Device() {
#if TESSERA_USE_CUDA
    if (seen != nullptr) cudaFreeHost(seen);
#endif
  }
};

// The first step and tensor with a NaN or an infinity, as the host last saw them (the CPU's
// push writes them; a GPU step copies its counters into Device::seen).
struct FusedUpdate::Nonfinite {
  std::atomic<int64_t> step{0};
  std::atomic<int32_t> tensor{internal::kNoTensor};
};

namespace {

size_t HyperSize(const UpdateKernel& kernel) {
  return std::visit([](const auto& k) { return sizeof(k.h); }, kernel);
}

internal::FusedKind KindOf(const UpdateKernel& kernel) {
  return std::visit([](const auto& k) { return std::decay_t<decltype(k)>::kKind; }, kernel);
}

bool Clips(const UpdateKernel& kernel) {
  return std::visit([](const auto& k) { return k.h.clip_gradient >= 0.0f; }, kernel);
}

template <typename T>
void Append(std::string* out, const T& value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

size_t AlignUp(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

FusedUpdate::FusedUpdate(Optimizer* optimizer, std::vector<int> indices,
                         std::vector<NDArray> weights, std::vector<NDArray> grads, Options options)
    : optimizer_(optimizer),
      indices_(std::move(indices)),
      weights_(std::move(weights)),
      grads_(std::move(grads)),
      options_(options),
      ctx_(weights_.front().ctx()) {}

FusedUpdate::~FusedUpdate() = default;

absl::StatusOr<std::unique_ptr<FusedUpdate>> FusedUpdate::Create(Optimizer* optimizer,
                                                                 std::vector<int> indices,
                                                                 std::vector<NDArray> weights,
                                                                 std::vector<NDArray> grads,
                                                                 Options options) {
  const std::string who = absl::StrCat(optimizer->name(), ": fused update");
  if (indices.empty() || indices.size() != weights.size() || indices.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": needs one weight and one grad per index, got ",
                                                   indices.size(), " indices, ", weights.size(),
                                                   " weights and ", grads.size(), " grads"));
  }
  if (options.lookahead < 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": lookahead must be >= 1, got ", options.lookahead));
  }
  std::set<int> seen;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (!seen.insert(indices[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": index ", indices[i], " is given twice"));
    }
    // What Update refuses (none arrays, dtypes, shapes, devices, a state of another shape).
    RETURN_IF_ERROR(optimizer->CheckUpdate(indices[i], weights[i], grads[i]));
    if (weights[i].ctx() != weights[0].ctx()) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": index ", indices[i], " is on ",
                                                     weights[i].ctx().ToString(), " but index ", indices[0],
                                                     " on ", weights[0].ctx().ToString(),
                                                     "; one fused update per device"));
    }
  }
  if (!options.loss_scale.is_none()) {
    const NDArray& scale = options.loss_scale;
    if (scale.dtype() != DType::kFloat32 || scale.shape() != Shape({1}) || scale.ctx() != weights[0].ctx()) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": the loss scale must be a (1,) float32 array on ",
                                                     weights[0].ctx().ToString(), ", got ", DTypeName(scale.dtype()),
                                                     " ", scale.shape().ToString(), " on ", scale.ctx().ToString()));
    }
    if (options.check_finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": check_finite with dynamic loss scaling: overflows are expected there, and skipped"));
    }
    if (weights[0].ctx().is_gpu()) {
      return absl::UnimplementedError(absl::StrCat(who, ": dynamic loss scaling on ", weights[0].ctx().ToString(),
                                                   " is not built yet (the CPU has it)"));
    }
  }
  if (!options.names.empty() && options.names.size() != indices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", options.names.size(), " names for ",
                                                   indices.size(), " indices"));
  }
  std::unique_ptr<FusedUpdate> fused(
      new FusedUpdate(optimizer, std::move(indices), std::move(weights), std::move(grads), options));
  FusedUpdate& f = *fused;
  f.nonfinite_ = std::make_shared<Nonfinite>();
  MutexLock lock(&f.optimizer_->mu_);
  const UpdateKernel kernel = f.optimizer_->KernelFor(Optimizer::Step{});
  f.kind_ = KindOf(kernel);
  f.clip_ = Clips(kernel);
  RETURN_IF_ERROR(f.RefreshLocked());  // makes the states of indices without them
  for (size_t i = 0; i < f.indices_.size(); ++i) {
    for (int64_t begin = 0; begin < f.weights_[i].Size(); begin += internal::kFusedChunkElements) {
      f.chunks_.push_back(FusedChunk{static_cast<int32_t>(i), 0, begin});
    }
  }
  auto device = std::make_shared<Device>();
  device->hyper_size = HyperSize(kernel);
  const size_t groups = f.group_lr_mult_.size();
  device->hyper_capacity =
      device->hyper_size * std::max<size_t>(static_cast<size_t>(options.lookahead) * groups, f.indices_.size());
  device->counters_at = 0;
  device->window_at = AlignUp(sizeof(FusedCounters));
  device->hypers_at = device->window_at + sizeof(FusedWindow);
  device->tensors_at = AlignUp(device->hypers_at + device->hyper_capacity);
  device->chunks_at = AlignUp(device->tensors_at + f.tensors_.size() * sizeof(FusedTensor));
  device->scaler_at = AlignUp(device->chunks_at + f.chunks_.size() * sizeof(FusedChunk));
  const size_t bytes = device->scaler_at + sizeof(internal::LossScalerState);
  ASSIGN_OR_RETURN(device->buffer, NDArray::Empty(f.weights_[0].runtime(), Shape({static_cast<int64_t>(bytes)}),
                                                  f.ctx_, DType::kUInt8));
  uint8_t* base = device->buffer.data().data<uint8_t>();
  internal::FusedTable& table = device->table;
  table.tensors = reinterpret_cast<const FusedTensor*>(base + device->tensors_at);
  table.chunks = reinterpret_cast<const FusedChunk*>(base + device->chunks_at);
  table.num_chunks = static_cast<int32_t>(f.chunks_.size());
  table.window = reinterpret_cast<const FusedWindow*>(base + device->window_at);
  table.hypers = base + device->hypers_at;
  table.counters = reinterpret_cast<FusedCounters*>(base + device->counters_at);
  if (!options.loss_scale.is_none()) {
    table.loss_scale = options.loss_scale.data().data<float>();
    table.scaler = reinterpret_cast<internal::LossScalerState*>(base + device->scaler_at);
  }
  if (!f.ctx_.is_gpu()) {
    f.device_ = std::move(device);
    return fused;
  }
#if TESSERA_USE_CUDA
  if (options.check_finite) {
    void* seen = nullptr;
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(&seen, sizeof(FusedCounters), cudaHostAllocDefault));
    device->seen = new (seen) FusedCounters();
  }
  f.device_ = std::move(device);
  return fused;
#else
  return absl::FailedPreconditionError(absl::StrCat(who, ": ", f.ctx_.ToString(), ": Tessera was built without CUDA"));
#endif
}

absl::Status FusedUpdate::RefreshLocked() {
  std::map<std::pair<double, double>, int> group_of;
  group_lr_mult_.clear();
  group_wd_mult_.clear();
  group_index_.clear();
  tensors_.clear();
  slots_.clear();
  for (size_t i = 0; i < indices_.size(); ++i) {
    const int index = indices_[i];
    bool created = false;
    ASSIGN_OR_RETURN(auto it, optimizer_->SlotLocked(index, weights_[i], &created));
    Optimizer::Slot& slot = it->second;
    if (!slots_.empty() && slot.count != slots_.front()->count) {
      return absl::FailedPreconditionError(absl::StrCat(
          optimizer_->name(), ": fused update: index ", index, " was updated ", slot.count,
          " times but index ", indices_.front(), " ", slots_.front()->count,
          " times; a fused update needs parameters updated together"));
    }
    slots_.push_back(&slot);
    auto lr = optimizer_->lr_mult_.find(index);
    auto wd = optimizer_->wd_mult_.find(index);
    const std::pair<double, double> mults{lr != optimizer_->lr_mult_.end() ? lr->second : 1.0,
                                          wd != optimizer_->wd_mult_.end() ? wd->second : 1.0};
    auto [g, added] = group_of.emplace(mults, static_cast<int>(group_lr_mult_.size()));
    if (added) {
      group_lr_mult_.push_back(mults.first);
      group_wd_mult_.push_back(mults.second);
      group_index_.push_back(index);
    }
    FusedTensor t;
    t.grad = grads_[i].data().data<float>();
    t.weight = weights_[i].data().data<float>();
    for (size_t s = 0; s < slot.states.size() && s < internal::kMaxFusedStates; ++s) {
      t.state[s] = slot.states[s].data().data<float>();
    }
    t.n = weights_[i].Size();
    t.group = g->second;
    tensors_.push_back(t);
  }
  read_vars_.clear();
  mutate_vars_.clear();
  const bool scaled = !options_.loss_scale.is_none();  // unscaling writes the gradients
  for (size_t i = 0; i < indices_.size(); ++i) {
    (scaled ? mutate_vars_ : read_vars_).push_back(grads_[i].var());
    mutate_vars_.push_back(weights_[i].var());
    for (const NDArray& state : slots_[i]->states) mutate_vars_.push_back(state.var());
  }
  if (scaled) mutate_vars_.push_back(options_.loss_scale.var());
  steps_ = slots_.front()->count;
  generation_ = optimizer_->generation_;
  ++refreshes_;
  window_rows_ = 0;
  tables_stale_ = true;
  return absl::OkStatus();
}

std::vector<UpdateKernel> FusedUpdate::KernelsLocked(int64_t t, double base_lr) const {
  std::vector<UpdateKernel> kernels;
  for (size_t g = 0; g < group_lr_mult_.size(); ++g) {
    Optimizer::Step step;
    step.lr = base_lr * group_lr_mult_[g];
    step.wd = optimizer_->wd_ * group_wd_mult_[g];
    step.t = t;
    step.index = group_index_[g];
    kernels.push_back(optimizer_->KernelFor(step));
  }
  return kernels;
}

absl::StatusOr<std::string> FusedUpdate::RowsLocked(int64_t first, int64_t rows) const {
  // Rates ahead from a copy of the scheduler: the optimizer's own moves with the steps.
  std::unique_ptr<LRScheduler> ahead;
  if (optimizer_->scheduler_ != nullptr) {
    ASSIGN_OR_RETURN(ahead, optimizer_->scheduler_->Clone());
  }
  std::string out;
  Append(&out, FusedWindow{first, rows, static_cast<int64_t>(group_lr_mult_.size())});
  // Update `first`'s num_update: the optimizer's, or with loss scaling (not counted yet) first.
  const int64_t first_num_update = std::max(optimizer_->num_update_, first);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t num_update = first_num_update + r;
    const double base = ahead != nullptr ? (*ahead)(num_update) : optimizer_->lr_;
    for (const UpdateKernel& kernel : KernelsLocked(first + r, base)) {
      std::visit([&](const auto& k) { Append(&out, k.h); }, kernel);
    }
  }
  return out;
}

absl::Status FusedUpdate::NonfiniteStatus() const {
  if (!options_.check_finite) return absl::OkStatus();
  int64_t step = nonfinite_->step.load();
  int32_t tensor = nonfinite_->tensor.load();
  if (step == 0 && device_->seen != nullptr) {
    // Written by the device's copy after each step; a value not yet complete reads as none.
    const volatile FusedCounters* seen = device_->seen;
    step = seen->nonfinite_step;
    tensor = seen->nonfinite_tensor;
  }
  if (step == 0 || tensor < 0 || static_cast<size_t>(tensor) >= indices_.size()) return absl::OkStatus();
  const size_t t = static_cast<size_t>(tensor);
  const std::string name =
      options_.names.empty() ? absl::StrCat("index ", indices_[t])
                             : absl::StrCat("'", options_.names[t], "' (index ", indices_[t], ")");
  return absl::FailedPreconditionError(absl::StrCat(
      optimizer_->name(), ": update ", step, ": the gradient of parameter ", name,
      " holds a NaN or an infinity (check_finite); training has diverged"));
}

bool FusedUpdate::StaleLocked() const {
  // The cached slots are the optimizer's only while its generation stands (LoadState
  // replaces them): look at their counts only then.
  bool changed = generation_ != optimizer_->generation_;
  for (size_t i = 0; !changed && i < slots_.size(); ++i) changed = slots_[i]->count != steps_;
  return changed;
}

int64_t FusedUpdate::NextUpdateLocked() const {
  // This step's, counted in BeginStepLocked; with loss scaling the one after the synced count
  // (a window starts right after a sync, every step before this one done).
  return scaled() ? steps_ + 1 : steps_;
}

absl::StatusOr<FusedUpdate::Pending> FusedUpdate::BeginStepLocked() {
  Pending p;
  p.old_num_update = optimizer_->num_update_;
  if (scaled()) {
    // The counts are the device's applied steps as of the last sync; the device may have
    // applied up to launched_ more. Sync when the window may not cover the next step.
    const bool leaves = window_rows_ == 0 || steps_ + launched_ + 1 >= window_first_ + window_rows_ ||
                        optimizer_->num_update_ - steps_ != window_offset_;
    if (leaves || StaleLocked()) RETURN_IF_ERROR(SyncLocked());
    if (StaleLocked()) RETURN_IF_ERROR(RefreshLocked());
    ++launched_;
    p.in_window = window_rows_ > 0 && steps_ + launched_ < window_first_ + window_rows_ &&
                  optimizer_->num_update_ - steps_ == window_offset_;
  } else {
    if (StaleLocked()) RETURN_IF_ERROR(RefreshLocked());
    for (Optimizer::Slot* slot : slots_) ++slot->count;
    ++steps_;
    optimizer_->num_update_ = std::max(optimizer_->num_update_, steps_);
    // The scheduler moves as for Update (the rows were computed ahead from a copy of it).
    (void)optimizer_->BaseLrLocked();
    p.in_window = steps_ >= window_first_ && steps_ < window_first_ + window_rows_ &&
                  optimizer_->num_update_ - steps_ == window_offset_;
  }
  absl::Status made;
  if (!p.in_window) {
    p.rows = std::min<int64_t>(options_.lookahead,
                               static_cast<int64_t>(device_->hyper_capacity /
                                                    (device_->hyper_size * group_lr_mult_.size())));
    absl::StatusOr<std::string> bytes = RowsLocked(NextUpdateLocked(), p.rows);
    made = bytes.status();
    if (bytes.ok()) p.uploads.emplace_back(device_->window_at, *std::move(bytes));
  }
  if (made.ok() && tables_stale_) {
    std::string counters;
    Append(&counters, FusedCounters{scaled() ? steps_ : steps_ - 1, 0});
    p.uploads.emplace_back(device_->counters_at, std::move(counters));
    p.uploads.emplace_back(device_->tensors_at, std::string(reinterpret_cast<const char*>(tensors_.data()),
                                                            tensors_.size() * sizeof(FusedTensor)));
    p.uploads.emplace_back(device_->chunks_at, std::string(reinterpret_cast<const char*>(chunks_.data()),
                                                           chunks_.size() * sizeof(FusedChunk)));
  }
  if (made.ok() && scaler_stale_ && device_->table.scaler != nullptr) {
    std::string scaler;
    Append(&scaler, scaler_start_);
    p.uploads.emplace_back(device_->scaler_at, std::move(scaler));
  }
  if (!made.ok()) {
    FinishStepLocked(p, made).IgnoreError();
    return made;
  }
  return p;
}

absl::Status FusedUpdate::FinishStepLocked(const Pending& p, const absl::Status& pushed) {
  if (pushed.ok()) {
    tables_stale_ = false;
    scaler_stale_ = false;
    if (!p.in_window) {
      window_first_ = NextUpdateLocked();
      window_rows_ = p.rows;
      window_offset_ = optimizer_->num_update_ - steps_;
    }
    return absl::OkStatus();
  }
  // Nothing ran: count nothing.
  if (scaled()) {
    --launched_;
  } else {
    for (Optimizer::Slot* slot : slots_) --slot->count;
    --steps_;
    optimizer_->num_update_ = p.old_num_update;
  }
  return absl::Status(pushed.code(), absl::StrCat(optimizer_->name(), ": fused update of ", indices_.size(),
                                                  " parameters on ", ctx_.ToString(), ": ", pushed.message()));
}

absl::StatusOr<FusedCounters> FusedUpdate::DeviceCounters() const {
  ASSIGN_OR_RETURN(NDArray head, device_->buffer.Slice(0, sizeof(FusedCounters)));
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, head.AsVector<uint8_t>());  // waits for the steps
  FusedCounters counters;
  std::memcpy(&counters, bytes.data(), sizeof(counters));
  return counters;
}

absl::Status FusedUpdate::SyncLocked() {
  if (!scaled() || launched_ == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const FusedCounters counters, DeviceCounters());
  const int64_t applied = counters.steps_done - steps_;
  if (counters.missed != 0 || applied < 0 || applied > launched_) {
    return absl::InternalError(absl::StrCat(optimizer_->name(), ": fused update on ", ctx_.ToString(),
                                            ": the device did ", counters.steps_done, " steps and missed ",
                                            counters.missed, "; the host had counted ", steps_,
                                            " and pushed ", launched_, " since"));
  }
  launched_ = 0;
  // LoadState may have replaced the slots (Module syncs before it); the other changes keep
  // them, so the applied steps count on the slots as looked up now.
  if (generation_ != optimizer_->generation_) RETURN_IF_ERROR(RefreshLocked());
  for (Optimizer::Slot* slot : slots_) slot->count += applied;
  steps_ += applied;
  optimizer_->num_update_ = std::max(optimizer_->num_update_, steps_);
  (void)optimizer_->BaseLrLocked();  // the scheduler moves as for Update
  return absl::OkStatus();
}

absl::Status FusedUpdate::Sync() {
  MutexLock lock(&optimizer_->mu_);
  return SyncLocked();
}

absl::Status FusedUpdate::Step(int priority) {
  RETURN_IF_ERROR(NonfiniteStatus());
  MutexLock lock(&optimizer_->mu_);
  ASSIGN_OR_RETURN(Pending p, BeginStepLocked());
  engine::Engine* eng = weights_.front().runtime().engine;
  auto upload = Uploader(std::move(p.uploads));
  auto work = DeviceWork();
  if (ctx_.is_gpu() && options_.cuda_graphs) {
    work = [device = device_, launch = std::move(work)](engine::RunContext rc) {
      return device->graph.Run(rc.stream, [&] { return launch(rc); });
    };
  }
  const absl::Status pushed = eng->PushSync(
      [upload = std::move(upload), work = std::move(work)](engine::RunContext rc) -> absl::Status {
        RETURN_IF_ERROR(upload(rc));
        return work(rc);
      },
      ctx_, read_vars_, write_vars(), engine::FnProperty::kNormal, priority, "fused_update");
  return FinishStepLocked(p, pushed);
}

absl::Status FusedUpdate::Prepare(int priority) {
  RETURN_IF_ERROR(NonfiniteStatus());
  MutexLock lock(&optimizer_->mu_);
  ASSIGN_OR_RETURN(Pending p, BeginStepLocked());
  absl::Status pushed;
  if (!p.uploads.empty()) {
    pushed = weights_.front().runtime().engine->PushSync(Uploader(std::move(p.uploads)), ctx_, {},
                                                         {device_->buffer.var()}, engine::FnProperty::kNormal,
                                                         priority, "fused_update_rows");
  }
  return FinishStepLocked(p, pushed);
}

std::vector<engine::VarHandle> FusedUpdate::write_vars() const {
  std::vector<engine::VarHandle> writes = mutate_vars_;
  writes.push_back(device_->buffer.var());
  return writes;
}

int64_t FusedUpdate::generation() const {
  MutexLock lock(&optimizer_->mu_);
  return refreshes_;
}

std::function<absl::Status(engine::RunContext)> FusedUpdate::Uploader(
    std::vector<std::pair<size_t, std::string>> uploads) const {
  const bool gpu = ctx_.is_gpu();
  return [device = device_, uploads = std::move(uploads), gpu](engine::RunContext rc) -> absl::Status {
    uint8_t* base = device->buffer.data().data<uint8_t>();
    for (const auto& [at, bytes] : uploads) {
      if (!gpu) {
        std::memcpy(base + at, bytes.data(), bytes.size());
        continue;
      }
#if TESSERA_USE_CUDA
      // Pageable memory: the copy is staged before cudaMemcpyAsync returns, so the bytes may
      // go with this function. Never inside a graph: they change from window to window.
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + at, bytes.data(), bytes.size(), cudaMemcpyHostToDevice,
                                           rc.get_stream<cudaStream_t>()));
#else
      (void)rc;
      return absl::FailedPreconditionError("a GPU fused update without CUDA");
#endif
    }
    return absl::OkStatus();
  };
}

std::function<absl::Status(engine::RunContext)> FusedUpdate::DeviceWork() const {
  const bool check = options_.check_finite;
  if (!ctx_.is_gpu()) {
    return [device = device_, kind = kind_, check, nonfinite = nonfinite_](engine::RunContext) {
      internal::FusedUpdateHost(kind, device->table, check);
      const FusedCounters& counters = *device->table.counters;
      if (counters.nonfinite_step != 0 && nonfinite->step.load() == 0) {
        nonfinite->tensor.store(counters.nonfinite_tensor);
        nonfinite->step.store(counters.nonfinite_step);
      }
      return absl::OkStatus();
    };
  }
#if TESSERA_USE_CUDA
  auto launch = [device = device_, kind = kind_, clip = clip_, check, ctx = ctx_](engine::RunContext rc) -> absl::Status {
    auto stream = rc.get_stream<cudaStream_t>();
    const cudaError_t err = internal::FusedUpdateGpu(kind, device->table, clip, check, stream);
    if (err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("fused update on ", ctx.ToString(), ": kernel launch failed: ",
                                              cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
    }
    // The host looks at the counters without waiting: page-locked, so the copy is part of
    // the step (and of its graph).
    if (check) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device->seen, device->table.counters, sizeof(FusedCounters),
                                           cudaMemcpyDeviceToHost, stream));
    }
    return absl::OkStatus();
  };
  return launch;
#else
  return [](engine::RunContext) { return absl::FailedPreconditionError("a GPU fused update without CUDA"); };
#endif
}

absl::Status FusedUpdate::Check() {
  RETURN_IF_ERROR(Sync());
  ASSIGN_OR_RETURN(const FusedCounters counters, DeviceCounters());
  if (counters.nonfinite_step != 0) {
    nonfinite_->tensor.store(counters.nonfinite_tensor);
    nonfinite_->step.store(counters.nonfinite_step);
  }
  RETURN_IF_ERROR(NonfiniteStatus());
  MutexLock lock(&optimizer_->mu_);
  if (counters.missed != 0 || counters.steps_done != steps_) {
    return absl::InternalError(absl::StrCat(optimizer_->name(), ": fused update on ", ctx_.ToString(),
                                            ": the device did ", counters.steps_done, " steps and missed ",
                                            counters.missed, ", the host counted ", steps_));
  }
  return absl::OkStatus();
}

absl::StatusOr<FusedUpdate::LossScaling> FusedUpdate::loss_scaling() const {
  if (options_.loss_scale.is_none()) {
    return absl::FailedPreconditionError(absl::StrCat(optimizer_->name(), ": fused update without loss scaling"));
  }
  ASSIGN_OR_RETURN(std::vector<float> scale, options_.loss_scale.AsVector<float>());
  ASSIGN_OR_RETURN(NDArray tail, device_->buffer.Slice(device_->scaler_at,
                                                       device_->scaler_at + sizeof(internal::LossScalerState)));
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, tail.AsVector<uint8_t>());
  internal::LossScalerState state;
  std::memcpy(&state, bytes.data(), sizeof(state));
  MutexLock lock(&optimizer_->mu_);
  // Until the next step writes it, the device's state is the one it will write.
  if (scaler_stale_) state = scaler_start_;
  return LossScaling{scale[0], state.skipped_steps, state.clean_steps};
}

absl::Status FusedUpdate::RestoreLossScaling(const LossScaling& state) {
  if (options_.loss_scale.is_none()) {
    return absl::FailedPreconditionError(absl::StrCat(optimizer_->name(), ": fused update without loss scaling"));
  }
  int exponent = 0;
  if (!(state.scale >= internal::kMinLossScale && state.scale <= internal::kMaxLossScale) ||
      std::frexp(state.scale, &exponent) != 0.5f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaling: scale ", state.scale, " is not a power of two in [",
        internal::kMinLossScale, ", ", internal::kMaxLossScale, "]"));
  }
  if (state.clean_steps < 0 || state.clean_steps >= internal::kLossScaleGrowthInterval ||
      state.skipped_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaling: clean_steps ", state.clean_steps, " (must be in [0, ",
        internal::kLossScaleGrowthInterval, ")) or skipped_steps ", state.skipped_steps,
        " (must be >= 0) out of range"));
  }
  NDArray scale = options_.loss_scale;
  RETURN_IF_ERROR(scale.SyncCopyFromCPU(&state.scale, 1));
  MutexLock lock(&optimizer_->mu_);
  scaler_start_ = {.clean_steps = state.clean_steps, .skipped_steps = state.skipped_steps};
  scaler_stale_ = true;
  return absl::OkStatus();
}

bool FusedUpdate::captured() const { return device_->graph.captured(); }

}  // namespace tessera::kvstore

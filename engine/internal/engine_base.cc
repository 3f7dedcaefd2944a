#include "engine/internal/engine_base.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/status_macros.h"
#include "engine/internal/gpu_sync.h"
#include "engine/omp_threads.h"
#include "spdlog/spdlog.h"

namespace tessera::engine {

const char* FnPropertyName(FnProperty prop) {
  switch (prop) {
    case FnProperty::kNormal: return "normal";
    case FnProperty::kCopyFromGPU: return "copy_from_gpu";
    case FnProperty::kCopyToGPU: return "copy_to_gpu";
    case FnProperty::kCPUPrioritized: return "cpu_prioritized";
    case FnProperty::kAsync: return "async";
    case FnProperty::kDeleteVar: return "delete_var";
  }
  return "unknown";
}

namespace internal {
namespace {
thread_local bool in_engine_function = false;
}  // namespace

EngineBase::FunctionScope::FunctionScope() : outer_(in_engine_function) {
  in_engine_function = true;
}
EngineBase::FunctionScope::~FunctionScope() { in_engine_function = outer_; }

bool EngineBase::InEngineFunction() { return in_engine_function; }

EngineBase::EngineBase(const EngineOptions& options)
    : options_(options),
      num_gpus_(NumGpus()),
      omp_threads_(ResolveOmpThreadsPerWorker(options.omp_threads_per_worker, 1)),
      cpu_threads_(ResolveCpuThreadsPerFunction(options.omp_threads_per_worker, 1)) {
  if (!options_.profile_path.empty()) profiler_.Start(Profiler::Mode::kAll);
}

EngineBase::~EngineBase() {
  if (!options_.profile_path.empty()) {
    absl::Status s = profiler_.WriteChromeTrace(options_.profile_path);
    if (!s.ok()) spdlog::error("engine profiler: {}", s.ToString());
  }
}

VarHandle EngineBase::NewVariable() {
  Var* v = vars_.Acquire();
  v->owner = this;
  return VarHandle{v, v->generation.load(std::memory_order_acquire)};
}

absl::Status EngineBase::MarkDeleted(VarHandle var) {
  if (!IsLive(var, this)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeleteVariable: ", var.var == nullptr ? "a null (unknown) variable"
                            : var.var->owner != this ? "a variable of another engine"
                                                     : "the variable was already deleted"));
  }
  SpinLockGuard guard(&var.var->lock);
  if (var.var->generation.load(std::memory_order_relaxed) != var.generation ||
      var.var->deleted.exchange(true, std::memory_order_acq_rel)) {
    return absl::InvalidArgumentError("DeleteVariable: the variable was already deleted");
  }
  return absl::OkStatus();
}

void EngineBase::RecycleVar(Var* var) {
  {
    SpinLockGuard guard(&var->lock);
    TESSERA_CHECK(var->head == nullptr && var->running_reads == 0 && !var->running_write);
    var->error.reset();
    delete var->gpu.exchange(nullptr, std::memory_order_acq_rel);
    var->deleted.store(false, std::memory_order_release);
  }
  vars_.Release(var);
}

absl::StatusOr<OprHandle> EngineBase::NewOperator(AsyncFn fn,
                                                  absl::Span<const VarHandle> const_vars,
                                                  absl::Span<const VarHandle> mutate_vars,
                                                  FnProperty prop, const char* name) {
  if (!fn) return absl::InvalidArgumentError(absl::StrCat("NewOperator '", name ? name : "", "': empty function"));
  Opr* opr = oprs_.Acquire();
  absl::Status s = ResolveVars(this, name, const_vars, mutate_vars, &opr->const_vars,
                               &opr->mutate_vars);
  if (!s.ok()) {
    opr->Reset();
    oprs_.Release(opr);
    return s;
  }
  opr->async_fn = std::move(fn);
  opr->prop = prop;
  opr->name = name;
  opr->owner = this;
  opr->refs.store(1, std::memory_order_release);  // the handle's reference
  return OprHandle{opr, opr->generation.load(std::memory_order_acquire)};
}

absl::StatusOr<Opr*> EngineBase::AcquireOpr(OprHandle h) {
  auto live = [&] {
    return h.opr != nullptr && h.opr->owner == this &&
           h.opr->generation.load(std::memory_order_acquire) == h.generation &&
           !h.opr->deleted.load(std::memory_order_acquire);
  };
  if (!live()) {
    return absl::InvalidArgumentError(
        h.opr == nullptr ? "Push: a null (unknown) operator" : "Push: a deleted operator");
  }
  h.opr->refs.fetch_add(1, std::memory_order_acq_rel);
  // Re-check: the operator may have been deleted and even recycled since the first look.
  if (!live()) {
    if (h.opr->owner == this && h.opr->generation.load(std::memory_order_acquire) == h.generation) {
      ReleaseOpr(h.opr);
    } else {
      h.opr->refs.fetch_sub(1, std::memory_order_acq_rel);
    }
    return absl::InvalidArgumentError("Push: a deleted operator");
  }
  return h.opr;
}

void EngineBase::ReleaseOpr(Opr* opr) {
  if (opr->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    opr->Reset();
    oprs_.Release(opr);
  }
}

absl::Status EngineBase::DeleteOperator(OprHandle op) {
  if (op.opr == nullptr || op.opr->owner != this ||
      op.opr->generation.load(std::memory_order_acquire) != op.generation ||
      op.opr->deleted.exchange(true, std::memory_order_acq_rel)) {
    return absl::InvalidArgumentError(op.opr == nullptr ? "DeleteOperator: a null operator"
                                                        : "DeleteOperator: already deleted");
  }
  ReleaseOpr(op.opr);  // the handle's reference; in-flight pushes hold their own
  return absl::OkStatus();
}

absl::Status EngineBase::CheckContext(Context ctx, const char* fn_name) const {
  if (ctx.type == DeviceType::kGPU && (ctx.id < 0 || ctx.id >= num_gpus_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("function '", fn_name != nullptr ? fn_name : "(unnamed function)",
                     "': ", ctx.ToString(), " is not available (this process sees ", num_gpus_,
                     " GPU", num_gpus_ == 1 ? "" : "s", ")"));
  }
  if (ctx.id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad context ", ctx.ToString()));
  }
  return absl::OkStatus();
}

absl::Status EngineBase::PrepareOneShot(Opr* opr, Context ctx,
                                        absl::Span<const VarHandle> const_vars,
                                        absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                        const char* name) const {
  RETURN_IF_ERROR(CheckContext(ctx, name));
  RETURN_IF_ERROR(
      ResolveVars(this, name, const_vars, mutate_vars, &opr->const_vars, &opr->mutate_vars));
  opr->prop = prop;
  opr->name = name;
  return absl::OkStatus();
}

std::shared_ptr<ErrorRecord> EngineBase::InheritedError(const Opr& opr) {
  for (const VarList* list : {&opr.const_vars, &opr.mutate_vars}) {
    for (Var* v : *list) {
      if (v->pending_error() != nullptr) return v->error;
    }
  }
  return nullptr;
}

absl::Status EngineBase::RunSync(const SyncFn& fn, RunContext rctx) {
  try {
    return fn(rctx);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("unknown exception");
  }
}

std::shared_ptr<ErrorRecord> EngineBase::OutcomeError(const Opr& opr, const absl::Status& status,
                                                      std::shared_ptr<ErrorRecord> inherited) {
  if (status.ok()) return inherited;
  auto error = std::make_shared<ErrorRecord>(FunctionFailed(opr.name, status));
  if (!shutting_down()) spdlog::debug("engine: {}", error->status.ToString());
  MutexLock guard(&failures_mu_);
  failures_.push_back(error);
  return error;
}

absl::Status EngineBase::TakeUnreportedFailure() {
  std::vector<std::shared_ptr<ErrorRecord>> failures;
  {
    MutexLock guard(&failures_mu_);
    failures.swap(failures_);
  }
  absl::Status first;
  for (auto& f : failures) {
    if (f->TakeReport() && first.ok()) first = f->status;
  }
  return first;
}

}  // namespace internal
}  // namespace tessera::engine

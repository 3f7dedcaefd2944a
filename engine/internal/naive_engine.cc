#include "engine/internal/naive_engine.h"

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "engine/internal/gpu_sync.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_status.h"
#endif

namespace tessera::engine::internal {

NaiveEngine::NaiveEngine(const EngineOptions& options) : EngineBase(options) {}

NaiveEngine::~NaiveEngine() {
  for (void* s : streams_) DestroyStream(s);
}

absl::StatusOr<void*> NaiveEngine::StreamFor(Context ctx) {
  if (!ctx.is_gpu()) return nullptr;
  if (streams_.size() <= static_cast<size_t>(ctx.id)) streams_.resize(ctx.id + 1, nullptr);
  if (streams_[ctx.id] == nullptr) {
    absl::StatusOr<void*> s = CreateStream(ctx.id);
    if (!s.ok()) return s.status();
    streams_[ctx.id] = *s;
  }
  return streams_[ctx.id];
}

namespace {

// Where an asynchronous function's callback leaves its outcome.
struct AsyncDone {
  Mutex mu;
  CondVar cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);

  static void Complete(Engine*, void* param, absl::Status status) {
    auto* d = static_cast<AsyncDone*>(param);
    MutexLock guard(&d->mu);
    d->status = std::move(status);
    d->done = true;
    d->cv.SignalAll();
  }
};

}  // namespace

void NaiveEngine::Run(const Opr& opr, Context ctx, bool profiling) {
  std::lock_guard<std::recursive_mutex> guard(mu_);
  std::shared_ptr<ErrorRecord> inherited = opr.runs_despite_errors ? nullptr : InheritedError(opr);
  absl::Status status;
  if (inherited == nullptr) {
    FunctionScope scope;
    const int64_t start = profiler().ShouldRecord(profiling) ? Profiler::NowNs() : 0;
    RunContext rctx{ctx, nullptr};
    rctx.cpu_threads = ctx.is_gpu() ? 1 : cpu_threads_per_function();
    absl::StatusOr<void*> stream = StreamFor(ctx);
    if (!stream.ok()) {
      status = stream.status();
    } else {
      rctx.stream = *stream;
      if (opr.sync_fn) {
        status = RunSync(opr.sync_fn, rctx);
      } else {
        AsyncDone done;
        opr.async_fn(rctx, CreateCallback(&AsyncDone::Complete, &done));
        MutexLock lock(&done.mu);
        while (!done.done) done.cv.Wait(&done.mu);
        status = std::move(done.status);
      }
#if TESSERA_USE_CUDA
      if (status.ok() && rctx.stream != nullptr) {
        status = CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(rctx.stream)),
                            "cudaStreamSynchronize", __FILE__, __LINE__);
      }
#endif
    }
    if (start != 0) {
      profiler().Record({opr.name, ctx, opr.prop, Profiler::ThisThreadId(), start,
                         Profiler::NowNs()});
    }
  }
  std::shared_ptr<ErrorRecord> error = OutcomeError(opr, status, std::move(inherited));
  for (Var* v : opr.mutate_vars) v->set_error(error);
}

absl::Status NaiveEngine::PushAsync(AsyncFn fn, Context ctx,
                                    absl::Span<const VarHandle> const_vars,
                                    absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                    int /*priority*/, const char* name, bool profiling) {
  Opr opr;
  RETURN_IF_ERROR(PrepareOneShot(&opr, ctx, const_vars, mutate_vars, prop, name));
  opr.async_fn = std::move(fn);
  Run(opr, ctx, profiling);
  return absl::OkStatus();
}

absl::Status NaiveEngine::PushSync(SyncFn fn, Context ctx, absl::Span<const VarHandle> const_vars,
                                   absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                   int /*priority*/, const char* name, bool profiling) {
  Opr opr;
  RETURN_IF_ERROR(PrepareOneShot(&opr, ctx, const_vars, mutate_vars, prop, name));
  opr.sync_fn = std::move(fn);
  Run(opr, ctx, profiling);
  return absl::OkStatus();
}

absl::Status NaiveEngine::Push(OprHandle op, Context ctx, int /*priority*/, bool profiling) {
  absl::StatusOr<Opr*> opr = AcquireOpr(op);
  if (!opr.ok()) return opr.status();
  absl::Status s = CheckContext(ctx, (*opr)->name);
  if (s.ok()) Run(**opr, ctx, profiling);
  ReleaseOpr(*opr);
  return s;
}

absl::Status NaiveEngine::DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) {
  std::lock_guard<std::recursive_mutex> guard(mu_);
  if (absl::Status s = MarkDeleted(var); !s.ok()) return s;
  if (delete_fn) {
    FunctionScope scope;
    absl::Status s = RunSync(delete_fn, RunContext{ctx, nullptr});
    if (!s.ok()) {
      Opr deletion;
      deletion.name = "DeleteVariable";
      OutcomeError(deletion, s, nullptr);  // reported by WaitForAll
    }
  }
  RecycleVar(var.var);
  return absl::OkStatus();
}

absl::Status NaiveEngine::WaitForVar(VarHandle var) {
  if (InEngineFunction()) {
    return absl::FailedPreconditionError(
        "WaitForVar called from inside an engine function (it would deadlock)");
  }
  std::lock_guard<std::recursive_mutex> guard(mu_);
  if (!IsLive(var, this)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WaitForVar: ", var.var == nullptr ? "a null (unknown) variable" : "a deleted variable"));
  }
  ErrorRecord* e = var.var->pending_error();
  if (e != nullptr && e->TakeReport()) return e->status;
  return absl::OkStatus();
}

absl::Status NaiveEngine::WaitForAll() {
  if (InEngineFunction()) {
    return absl::FailedPreconditionError(
        "WaitForAll called from inside an engine function (it would deadlock)");
  }
  std::lock_guard<std::recursive_mutex> guard(mu_);
  return TakeUnreportedFailure();
}

}  // namespace tessera::engine::internal

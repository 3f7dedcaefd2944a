// EngineBase: what NaiveEngine and ThreadedEngine share: variable and operator pools with
// handle validation, failure bookkeeping, the profiler and the OpenMP setting. The
// subclasses only decide when and where functions run.
//
// Thread-safe.
#ifndef TESSERA_ENGINE_INTERNAL_ENGINE_BASE_H_
#define TESSERA_ENGINE_INTERNAL_ENGINE_BASE_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
#include "engine/create_engine.h"
#include "engine/engine.h"
#include "engine/internal/opr.h"
#include "engine/internal/var.h"
#include "engine/internal/var_pool.h"
#include "engine/profiler.h"

namespace tessera::engine::internal {

class EngineBase : public Engine {
 public:
  ~EngineBase() override;

  VarHandle NewVariable() override;
  absl::StatusOr<OprHandle> NewOperator(AsyncFn fn, absl::Span<const VarHandle> const_vars,
                                        absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                        const char* name) override;
  absl::Status DeleteOperator(OprHandle op) override;
  void NotifyShutdown() override { shutting_down_.store(true, std::memory_order_relaxed); }
  int num_omp_threads_per_worker() const override {
    return omp_threads_.load(std::memory_order_relaxed);
  }
  // An explicit setting also bounds what one function's kernels may use.
  void set_num_omp_threads_per_worker(int n) override {
    omp_threads_.store(n < 1 ? 1 : n, std::memory_order_relaxed);
    cpu_threads_.store(n < 1 ? 1 : n, std::memory_order_relaxed);
  }
  Profiler& profiler() override { return profiler_; }

  // True while the calling thread runs an engine function (of any engine).
  static bool InEngineFunction();

 protected:
  explicit EngineBase(const EngineOptions& options);

  // Sets the in-function flag for its scope.
  class FunctionScope {
   public:
    FunctionScope();
    ~FunctionScope();

   private:
    bool outer_;
  };

  // Fills a one-shot function's variables, property and name after validating the
  // handles and the context; its function is the caller's to set.
  absl::Status PrepareOneShot(Opr* opr, Context ctx, absl::Span<const VarHandle> const_vars,
                              absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                              const char* name) const;
  // An error when `ctx` names a GPU this process cannot use.
  absl::Status CheckContext(Context ctx, const char* fn_name) const;
  // Validates `var` for DeleteVariable and marks it deleted; later pushes are rejected.
  absl::Status MarkDeleted(VarHandle var);
  // Returns a deleted variable's slot to the pool (after its deletion ran).
  void RecycleVar(Var* var);

  // Takes a reference on a live pre-built operator for one push.
  absl::StatusOr<Opr*> AcquireOpr(OprHandle op);
  void ReleaseOpr(Opr* opr);

  // The unreported failure carried by any of the function's variables, or null.
  static std::shared_ptr<ErrorRecord> InheritedError(const Opr& opr);
  // Runs a synchronous function, turning exceptions into a status.
  static absl::Status RunSync(const SyncFn& fn, RunContext rctx);
  // The error a finished function leaves on the variables it mutates: a new failure
  // (recorded for WaitForAll) when `status` is not ok, else `inherited` (null on success).
  std::shared_ptr<ErrorRecord> OutcomeError(const Opr& opr, const absl::Status& status,
                                            std::shared_ptr<ErrorRecord> inherited)
      ABSL_LOCKS_EXCLUDED(failures_mu_);
  // The first failure since the last call that nobody reported yet.
  absl::Status TakeUnreportedFailure() ABSL_LOCKS_EXCLUDED(failures_mu_);

  bool shutting_down() const { return shutting_down_.load(std::memory_order_relaxed); }
  int num_gpus() const { return num_gpus_; }
  const EngineOptions& options() const { return options_; }
  // RunContext::cpu_threads for a compute worker's function (ResolveCpuThreadsPerFunction).
  int cpu_threads_per_function() const { return cpu_threads_.load(std::memory_order_relaxed); }
  void set_cpu_threads_per_function(int n) {
    cpu_threads_.store(n < 1 ? 1 : n, std::memory_order_relaxed);
  }

 private:
  const EngineOptions options_;
  const int num_gpus_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int> omp_threads_;
  // RunContext::cpu_threads of the functions the compute workers (the naive engine: the
  // pushing thread) run.
  std::atomic<int> cpu_threads_;
  Profiler profiler_;
  SlabPool<Var> vars_;
  SlabPool<Opr> oprs_;
  Mutex failures_mu_;
  std::vector<std::shared_ptr<ErrorRecord>> failures_ ABSL_GUARDED_BY(failures_mu_);
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_ENGINE_BASE_H_

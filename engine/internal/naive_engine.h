// NaiveEngine: runs every function synchronously on the pushing thread, in push order.
//
// The reference the threaded engine is tested against, and a debugging aid
// (TESSERA_ENGINE=naive): failures surface at the push that caused them, stacks are
// plain. Pushes from several threads are serialized by one lock. An asynchronous
// function's push returns only after its callback ran. GPU functions get a per-device
// stream that is synchronized after each function.
#ifndef TESSERA_ENGINE_INTERNAL_NAIVE_ENGINE_H_
#define TESSERA_ENGINE_INTERNAL_NAIVE_ENGINE_H_

#include <mutex>
#include <vector>

#include "engine/internal/engine_base.h"

namespace tessera::engine::internal {

class NaiveEngine final : public EngineBase {
 public:
  explicit NaiveEngine(const EngineOptions& options);
  ~NaiveEngine() override;

  absl::Status DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) override;
  absl::Status Push(OprHandle op, Context ctx, int priority, bool profiling) override;
  absl::Status PushAsync(AsyncFn fn, Context ctx, absl::Span<const VarHandle> const_vars,
                         absl::Span<const VarHandle> mutate_vars, FnProperty prop, int priority,
                         const char* name, bool profiling) override;
  absl::Status PushSync(SyncFn fn, Context ctx, absl::Span<const VarHandle> const_vars,
                        absl::Span<const VarHandle> mutate_vars, FnProperty prop, int priority,
                        const char* name, bool profiling) override;
  absl::Status WaitForVar(VarHandle var) override;
  absl::Status WaitForAll() override;
  // Every push runs before it returns.
  int64_t pending_functions() const override { return 0; }

 private:
  // Runs `opr` now, storing its outcome on its variables.
  void Run(const Opr& opr, Context ctx, bool profiling);
  absl::StatusOr<void*> StreamFor(Context ctx);

  // Recursive: a function may push more functions, which then run inline.
  std::recursive_mutex mu_;
  std::vector<void*> streams_;  // per GPU, created on first use; guarded by mu_
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_NAIVE_ENGINE_H_

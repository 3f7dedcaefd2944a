// Var: the engine's state behind a VarHandle, shared by both engines.
//
// A Var lives in a VarPool slab for the engine's whole life; deleting it bumps its
// generation and returns the slot to the pool, so a stale VarHandle is detected by
// comparing generations instead of touching freed memory.
//
// Threading: `lock` guards the dependency queue, `deleted` and `gpu`. `error` is not
// locked: it is written only by the function that holds the variable for writing and read
// only by functions that hold it (for reading or writing), so the dependency protocol
// itself orders every access (each hand-over goes through `lock`).
#ifndef TESSERA_ENGINE_INTERNAL_VAR_H_
#define TESSERA_ENGINE_INTERNAL_VAR_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "engine/internal/spin_lock.h"

namespace tessera::engine {

class Var;

namespace internal {
struct OprBlock;
struct GpuVarState;
}  // namespace internal

// The failure of one function, shared by every variable it reached. `reported` flips once,
// when WaitForVar or WaitForAll hands the status to a caller; after that the record no
// longer blocks anything.
struct ErrorRecord {
  explicit ErrorRecord(absl::Status s) : status(std::move(s)) {}
  const absl::Status status;
  std::atomic<bool> reported{false};

  bool pending() const { return !reported.load(std::memory_order_acquire); }
  // True for the one caller that gets to report it.
  bool TakeReport() { return !reported.exchange(true, std::memory_order_acq_rel); }
};

namespace internal {

// One pending use of a variable by one pushed function (embedded in the OprBlock).
struct VarNode {
  VarNode* next = nullptr;
  OprBlock* block = nullptr;
  Var* var = nullptr;
  bool write = false;
  bool appended = false;  // false when the variable was deleted before the push reached it
};

}  // namespace internal

// Two cache lines: the dependency queue, which the pushing thread and the workers both
// write, and the rest, which they mostly read. (On one line, every worker's look at
// `error` missed while a pusher appended to the queue: engine_bench, chain workload.)
class alignas(64) Var {
 public:
  internal::SpinLock lock;
  // Dependency queue of the threaded engine: uses waiting behind the running ones.
  internal::VarNode* head ABSL_GUARDED_BY(lock) = nullptr;
  internal::VarNode* tail ABSL_GUARDED_BY(lock) = nullptr;
  int running_reads ABSL_GUARDED_BY(lock) = 0;
  bool running_write ABSL_GUARDED_BY(lock) = false;

  // Bumped (under `lock`) each time the slot is recycled. Atomic so that the unlocked
  // validity check at push time is race-free.
  alignas(64) std::atomic<uint32_t> generation{1};
  // DeleteVariable was called; further pushes are rejected.
  std::atomic<bool> deleted{false};

  // Set once a GPU function touched the variable (threaded engine with CUDA only).
  std::atomic<internal::GpuVarState*> gpu{nullptr};

  // Written by the functions that mutate the variable: only when it changes, so that the
  // line stays shared while nothing fails.
  std::shared_ptr<ErrorRecord> error;

  // An unreported failure carried by this variable, or null.
  ErrorRecord* pending_error() const {
    return error != nullptr && error->pending() ? error.get() : nullptr;
  }
  void set_error(const std::shared_ptr<ErrorRecord>& e) {
    if (error != e) error = e;
  }

  Var* next_free = nullptr;  // VarPool free list
  const void* owner = nullptr;  // the engine that created it
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_INTERNAL_VAR_H_

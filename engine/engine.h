// Engine: the dependency engine. It runs functions on devices in an order that respects
// their declared read/write sets, as the MXNet architecture describes.
//
// The rule. Every function declares the variables it reads (`const_vars`) and mutates
// (`mutate_vars`). Two functions that share a variable which either one mutates run in push
// order; functions that only read a variable may run at the same time. A variable listed
// both as read and mutated counts as mutated; a variable listed twice is folded.
//
// Every Push* returns at once. The returned Status only reports misuse detected at push
// time (an unknown or deleted variable, a deleted operator); failures of the function
// itself are stored on the variables it mutates: functions that later read or write those
// variables are skipped and carry the error on, and WaitForVar/WaitForAll return it, naming
// the function that failed. Each failure is reported once; after that its variables are
// usable again. The engine keeps working for unrelated variables throughout.
//
// Thread safety: every method may be called from any number of threads at once (unlike
// MXNet's engine). WaitForVar/WaitForAll called from inside an engine function return
// FAILED_PRECONDITION instead of deadlocking.
//
// Implementations: NaiveEngine runs each push synchronously on the calling thread (a
// reference for debugging); ThreadedEngine keeps a queue per variable and runs ready
// functions on per-device worker pools. CreateEngine chooses by EngineOptions, which
// FromEnv fills from TESSERA_ENGINE and friends (see engine_options.h).
#ifndef TESSERA_ENGINE_ENGINE_H_
#define TESSERA_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context.h"

namespace tessera::engine {

class Var;
class Opr;
class Profiler;

// What kind of work a function is; decides the worker queue it runs on.
enum class FnProperty : int8_t {
  kNormal = 0,        // compute on the worker pool of its context
  kCopyFromGPU = 1,   // GPU -> host copy, on the GPU's copy worker and stream
  kCopyToGPU = 2,     // host -> GPU copy, on the GPU's copy worker and stream
  kCPUPrioritized = 3,  // on the dedicated high-priority CPU queue
  kAsync = 4,         // returns at once and completes through its callback later; run
                      // inline by whichever thread finds it ready
  kDeleteVar = 5,     // the deletion of a variable (pushed by DeleteVariable)
};

const char* FnPropertyName(FnProperty prop);

// What the engine decided at run time for one execution of a function.
struct RunContext {
  Context ctx;
  // The cudaStream_t to enqueue GPU work on; null for CPU functions.
  void* stream = nullptr;
  // The OpenMP threads one large CPU kernel of this function may run on
  // (engine/omp_threads.h: ThreadsForWork); small kernels stay on the calling thread. More
  // than the thread's own setting where the compute workers leave a CPU to the pushing
  // thread; 1 on the priority and GPU workers and for a caller helping in WaitForAll.
  int cpu_threads = 1;
  template <typename T>
  T get_stream() const {
    return static_cast<T>(stream);
  }
};

// Handle to an engine variable: a token standing for a resource functions read or write.
// Cheap to copy. A default-constructed handle is "unknown"; a handle kept after its
// variable was deleted is detected and rejected (the generation no longer matches).
struct VarHandle {
  Var* var = nullptr;
  uint32_t generation = 0;
  explicit operator bool() const { return var != nullptr; }
  friend bool operator==(VarHandle a, VarHandle b) {
    return a.var == b.var && a.generation == b.generation;
  }
};

// Handle to a pre-built operator (NewOperator), reusable across pushes.
struct OprHandle {
  Opr* opr = nullptr;
  uint32_t generation = 0;
  explicit operator bool() const { return opr != nullptr; }
};

class Engine;

// Completion callback handed to asynchronous functions. Call it exactly once, from any
// thread, with the function's outcome.
class CallbackOnComplete {
 public:
  using Fn = void (*)(Engine* engine, void* param, absl::Status status);
  CallbackOnComplete() = default;
  CallbackOnComplete(Fn fn, Engine* engine, void* param)
      : fn_(fn), engine_(engine), param_(param) {}
  void operator()(absl::Status status = absl::OkStatus()) const {
    fn_(engine_, param_, std::move(status));
  }

 private:
  Fn fn_ = nullptr;
  Engine* engine_ = nullptr;  // not owned
  void* param_ = nullptr;     // not owned
};

class Engine {
 public:
  // A function that finishes when it returns. A non-OK status marks it failed.
  using SyncFn = std::function<absl::Status(RunContext)>;
  // A function that finishes when it calls its callback (possibly from another thread).
  using AsyncFn = std::function<void(RunContext, CallbackOnComplete)>;

  virtual ~Engine() = default;

  // Allocates a new variable.
  virtual VarHandle NewVariable() = 0;

  // Schedules the deletion of `var` after every function already pushed that uses it;
  // `delete_fn` (may be null) runs at that point on `ctx`. Pushes that name `var`
  // afterwards are rejected.
  virtual absl::Status DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) = 0;

  // Builds a reusable operator. `name` must outlive the engine (a literal or a registry
  // entry); it names the function in errors and profiles.
  virtual absl::StatusOr<OprHandle> NewOperator(AsyncFn fn, absl::Span<const VarHandle> const_vars,
                                                absl::Span<const VarHandle> mutate_vars,
                                                FnProperty prop = FnProperty::kNormal,
                                                const char* name = nullptr) = 0;
  // Deletes `op` once every push of it already made has finished.
  virtual absl::Status DeleteOperator(OprHandle op) = 0;
  // Pushes one execution of a pre-built operator. Higher priorities run first among
  // functions that are ready at the same time.
  virtual absl::Status Push(OprHandle op, Context ctx, int priority = 0,
                            bool profiling = false) = 0;

  virtual absl::Status PushAsync(AsyncFn fn, Context ctx, absl::Span<const VarHandle> const_vars,
                                 absl::Span<const VarHandle> mutate_vars,
                                 FnProperty prop = FnProperty::kNormal, int priority = 0,
                                 const char* name = nullptr, bool profiling = false) = 0;
  virtual absl::Status PushSync(SyncFn fn, Context ctx, absl::Span<const VarHandle> const_vars,
                                absl::Span<const VarHandle> mutate_vars,
                                FnProperty prop = FnProperty::kNormal, int priority = 0,
                                const char* name = nullptr, bool profiling = false) = 0;

  // Blocks until every function pushed so far that uses `var` has finished; returns the
  // unreported failure stored on `var`, if any.
  virtual absl::Status WaitForVar(VarHandle var) = 0;
  // Blocks until every function pushed so far has finished; returns the first failure not
  // reported yet, if any.
  virtual absl::Status WaitForAll() = 0;

  // Tells the engine the process is shutting down: queued work still runs, but the
  // engine logs less. Callers need not call it.
  virtual void NotifyShutdown() = 0;

  // Functions pushed and not finished yet: waiting for their variables, queued for a
  // thread, or running. A snapshot, for metrics.
  virtual int64_t pending_functions() const = 0;

  // OpenMP threads each CPU worker should use inside one function.
  virtual int num_omp_threads_per_worker() const = 0;
  virtual void set_num_omp_threads_per_worker(int num_threads) = 0;

  // The profiler fed by this engine; see profiler.h.
  virtual Profiler& profiler() = 0;

  // Factory for CallbackOnComplete, as in the seeds' API reference.
  CallbackOnComplete CreateCallback(CallbackOnComplete::Fn fn, void* param) {
    return CallbackOnComplete(fn, this, param);
  }
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_ENGINE_H_

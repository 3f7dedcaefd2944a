// ThreadedEngine: runs ready functions on per-device worker pools.
//
// Each variable keeps a queue of the uses waiting behind the running ones (readers of one
// version run together; a writer runs alone). A pushed function waits for one grant per
// variable; the thread that hands it the last grant dispatches it to a queue:
//   - CPU (and pinned-CPU) functions: the CPU pool;
//   - kCPUPrioritized: a separate high-priority CPU pool;
//   - GPU functions: the GPU's compute workers, each owning a CUDA stream;
//   - kCopyToGPU / kCopyFromGPU on a GPU context: the GPU's copy workers and streams;
//   - kAsync: run inline by the dispatching thread (it returns at once by contract).
// Every queue orders by priority, then push order. A worker whose completion made a
// function of its own pool ready runs it next itself when nothing else is queued
// (TaskQueue::PushIfIdle), so a dependency chain stays on one core. GPU ordering is by
// CUDA events (see gpu_sync.h), never by blocking the worker.
//
// Pushes from many threads: a push naming at most one variable appends atomically under
// that variable's lock; a push naming several takes `push_mu_` around its appends, so all
// such pushes are totally ordered and no two can wait on each other in a cycle.
#ifndef TESSERA_ENGINE_INTERNAL_THREADED_ENGINE_H_
#define TESSERA_ENGINE_INTERNAL_THREADED_ENGINE_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
#include "engine/internal/engine_base.h"
#include "engine/internal/task_queue.h"

namespace tessera::engine::internal {

class ThreadedEngine final : public EngineBase {
 public:
  explicit ThreadedEngine(const EngineOptions& options);
  ~ThreadedEngine() override;

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
  int64_t pending_functions() const override {
    const int64_t completed = completed_.load(std::memory_order_relaxed);
    return pushed_.load(std::memory_order_relaxed) - completed;
  }

 private:
  using Queue = TaskQueue<OprBlock>;

  // A new block for a one-shot function, its variables resolved; null + status on error.
  absl::StatusOr<OprBlock*> NewOneShot(Context ctx, absl::Span<const VarHandle> const_vars,
                                       absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                       int priority, const char* name, bool profiling);
  // Appends `b` to its variables' queues and dispatches it if nothing blocks it.
  void Schedule(OprBlock* b, bool is_deletion = false);
  // One more dependency of `b` is met.
  void Grant(OprBlock* b) {
    // acq_rel: the granting thread's writes (errors, GPU events) happen-before the run.
    if (b->wait.fetch_sub(1, std::memory_order_acq_rel) == 1) Dispatch(b);
  }
  void Dispatch(OprBlock* b);
  Queue* QueueFor(const OprBlock& b);
  // Runs `b` on the calling thread; `stream` is the worker's CUDA stream (null on CPU),
  // `cpu_threads` its RunContext::cpu_threads. A compute worker passes its `running` flag,
  // set, and Execute clears it when the body is over, before the completion.
  void Execute(OprBlock* b, void* stream, int cpu_threads, std::atomic<bool>* running = nullptr);
  static void OnAsyncComplete(Engine* engine, void* param, absl::Status status);
  // Stores the outcome, releases the variables, and dispatches what became ready.
  void Complete(OprBlock* b, absl::Status status, std::shared_ptr<ErrorRecord> inherited);
  // The loop of worker `index` of `queue`.
  void WorkerLoop(Queue* queue, int index, Context ctx, bool owns_stream);
  void StartPool(Queue* queue, int threads, Context ctx, bool owns_stream);

  // GPU ordering (no-ops without CUDA or GPUs).
  absl::Status WaitForGpuInputs(OprBlock* b, void* stream);
  absl::Status RecordGpuOutputs(OprBlock* b);

  // Whether every compute worker is running a function now. WaitForAll's caller helps
  // only then: an idle worker takes a function with its OpenMP team, where the caller would
  // run it on one thread.
  bool AllComputeWorkersBusy() const;

  std::unique_ptr<Queue> cpu_queue_;
  std::unique_ptr<Queue> cpu_priority_queue_;
  // Compute worker i is running a function. One line each: a worker writes only its own.
  struct alignas(64) WorkerRunning {
    std::atomic<bool> running{false};
  };
  std::unique_ptr<WorkerRunning[]> compute_running_;
  int num_compute_workers_ = 0;
  std::vector<std::unique_ptr<Queue>> gpu_queues_;       // per device
  std::vector<std::unique_ptr<Queue>> gpu_copy_queues_;  // per device
  std::vector<std::thread> threads_;
  Mutex streams_mu_;
  // (device, stream) of every GPU worker
  std::vector<std::pair<int, void*>> streams_ ABSL_GUARDED_BY(streams_mu_);

  Mutex push_mu_;  // orders pushes that name several variables

  // Every function pushed has completed. Completions are read first: a push counted after
  // that read cannot make stale counts look equal, so equal counts mean that at the moment
  // of the first read nothing was pending.
  bool Idle() const {
    const int64_t completed = completed_.load(std::memory_order_seq_cst);
    return pushed_.load(std::memory_order_seq_cst) == completed;
  }

  // Functions pushed and completed; WaitForAll sleeps until they are equal. Two counters
  // on their own cache lines rather than one pending count: pushers and workers then each
  // write only their own line (one shared counter cost a line transfer per function).
  alignas(64) std::atomic<int64_t> pushed_{0};
  alignas(64) std::atomic<int64_t> completed_{0};
  alignas(64) std::atomic<int> all_waiters_{0};
  Mutex wait_mu_;
  CondVar wait_cv_;
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_THREADED_ENGINE_H_

#include "engine/internal/threaded_engine.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/cpu_count.h"
#include "engine/internal/block_pool.h"
#include "engine/internal/gpu_sync.h"
#include "engine/omp_threads.h"
#include "spdlog/spdlog.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_status.h"
#endif

namespace tessera::engine::internal {
namespace {

using ReadyList = absl::InlinedVector<OprBlock*, 8>;

// Asynchronous functions run inline on the thread that finds them ready; past this depth
// they go through the priority queue instead, so a long chain of them cannot overflow the
// stack.
constexpr int kMaxInlineDepth = 8;
thread_local int inline_depth = 0;

// The pool worker the calling thread is, while it runs its loop (not while it runs a
// function's body: a completion from in there, e.g. an asynchronous function's callback,
// must not park work on a worker that is busy for as long as that body takes).
struct WorkerIdentity {
  const void* queue = nullptr;
  int index = 0;
};
thread_local WorkerIdentity this_worker;

// Clears this_worker for a function's body.
class BodyScope {
 public:
  BodyScope() : saved_(this_worker) { this_worker.queue = nullptr; }
  ~BodyScope() { this_worker = saved_; }

 private:
  const WorkerIdentity saved_;
};

// Appends one use to `v`'s queue; true when it may start right away.
bool Append(Var* v, VarNode* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(v->lock) {
  node->next = nullptr;
  if (node->write) {
    if (v->head == nullptr && !v->running_write && v->running_reads == 0) {
      v->running_write = true;
      return true;
    }
  } else if (v->head == nullptr && !v->running_write) {
    ++v->running_reads;
    return true;
  }
  if (v->tail == nullptr) {
    v->head = v->tail = node;
  } else {
    v->tail->next = node;
    v->tail = node;
  }
  return false;
}

VarNode* PopHead(Var* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(v->lock) {
  VarNode* n = v->head;
  v->head = n->next;
  if (v->head == nullptr) v->tail = nullptr;
  return n;
}

// A running use of `v` finished: grants go to the next writer, or to every reader up to
// the next writer.
void Release(Var* v, bool write, ReadyList* ready) {
  SpinLockGuard guard(&v->lock);
  if (write) {
    v->running_write = false;
    while (v->head != nullptr && !v->head->write) {
      ++v->running_reads;
      ready->push_back(PopHead(v)->block);
    }
  } else {
    --v->running_reads;
  }
  if (v->running_reads == 0 && !v->running_write && v->head != nullptr) {
    v->running_write = true;  // the head is a writer: readers were drained above
    ready->push_back(PopHead(v)->block);
  }
}

}  // namespace

ThreadedEngine::ThreadedEngine(const EngineOptions& options) : EngineBase(options) {
  // Default: one CPU stays with the thread that pushes (the training loop); on a 2-CPU
  // machine a second worker only fights the pusher for the CPU (engine_bench).
  const int cpu_workers =
      options.cpu_workers > 0 ? options.cpu_workers : std::max(1, AvailableCpus() - 1);
  set_num_omp_threads_per_worker(
      ResolveOmpThreadsPerWorker(options.omp_threads_per_worker, cpu_workers));
  set_cpu_threads_per_function(
      ResolveCpuThreadsPerFunction(options.omp_threads_per_worker, cpu_workers));
  const int cpu_priority_workers = std::max(1, options.cpu_priority_workers);
  const int gpu_workers = std::max(1, options.gpu_workers_per_device);
  const int gpu_copy_workers = std::max(1, options.gpu_copy_workers_per_device);
  num_compute_workers_ = cpu_workers;
  compute_running_ = std::make_unique<WorkerRunning[]>(cpu_workers);
  cpu_queue_ = std::make_unique<Queue>(options.spin_us, cpu_workers);
  cpu_priority_queue_ = std::make_unique<Queue>(options.spin_us, cpu_priority_workers);
  StartPool(cpu_queue_.get(), cpu_workers, Context::CPU(), false);
  StartPool(cpu_priority_queue_.get(), cpu_priority_workers, Context::CPU(), false);
  for (int d = 0; d < num_gpus(); ++d) {
    gpu_queues_.push_back(std::make_unique<Queue>(options.spin_us, gpu_workers));
    gpu_copy_queues_.push_back(std::make_unique<Queue>(options.spin_us, gpu_copy_workers));
    StartPool(gpu_queues_.back().get(), gpu_workers, Context::GPU(d), true);
    StartPool(gpu_copy_queues_.back().get(), gpu_copy_workers, Context::GPU(d), true);
  }
}

ThreadedEngine::~ThreadedEngine() {
  NotifyShutdown();
  // Queued work still runs; its failures were the caller's to collect.
  absl::Status ignored = WaitForAll();
  (void)ignored;
  for (auto* q : {cpu_queue_.get(), cpu_priority_queue_.get()}) q->Shutdown();
  for (auto& q : gpu_queues_) q->Shutdown();
  for (auto& q : gpu_copy_queues_) q->Shutdown();
  for (std::thread& t : threads_) t.join();
}

void ThreadedEngine::StartPool(Queue* queue, int threads, Context ctx, bool owns_stream) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back(
        [this, queue, i, ctx, owns_stream] { WorkerLoop(queue, i, ctx, owns_stream); });
  }
}

void ThreadedEngine::WorkerLoop(Queue* queue, int index, Context ctx, bool owns_stream) {
  void* stream = nullptr;
  absl::Status stream_status;
  if (owns_stream) {
    absl::StatusOr<void*> s = CreateStream(ctx.id);
    if (s.ok()) {
      stream = *s;
      MutexLock guard(&streams_mu_);
      streams_.emplace_back(ctx.id, stream);
    } else {
      stream_status = s.status();
      spdlog::error("engine: no stream for {}: {}", ctx.ToString(), stream_status.ToString());
    }
  }
  this_worker = {queue, index};
  // Compute workers follow num_omp_threads_per_worker (settable while running); the others
  // run on one thread each (see omp_threads.h).
  const bool compute = queue == cpu_queue_.get();
  int omp_threads = 1;
  SetOmpThreadsOfThisThread(omp_threads);
  while (OprBlock* b = queue->Pop(index)) {
    if (compute && num_omp_threads_per_worker() != omp_threads) {
      omp_threads = num_omp_threads_per_worker();
      SetOmpThreadsOfThisThread(omp_threads);
    }
    if (!stream_status.ok()) {
      Complete(b, stream_status, nullptr);
    } else if (compute) {
      std::atomic<bool>& running = compute_running_[index].running;
      running.store(true, std::memory_order_relaxed);
      Execute(b, stream, std::max(omp_threads, cpu_threads_per_function()), &running);
    } else {
      Execute(b, stream, 1);
    }
  }
  DestroyStream(stream);
}

ThreadedEngine::Queue* ThreadedEngine::QueueFor(const OprBlock& b) {
  FnProperty prop = b.opr->prop;
  if (b.ctx.is_gpu()) {
    return prop == FnProperty::kCopyToGPU || prop == FnProperty::kCopyFromGPU
               ? gpu_copy_queues_[b.ctx.id].get()
               : gpu_queues_[b.ctx.id].get();
  }
  return prop == FnProperty::kCPUPrioritized ? cpu_priority_queue_.get() : cpu_queue_.get();
}

void ThreadedEngine::Dispatch(OprBlock* b) {
  if (b->opr->prop == FnProperty::kAsync && !b->ctx.is_gpu() && inline_depth < kMaxInlineDepth) {
    ++inline_depth;
    Execute(b, nullptr, 1);
    --inline_depth;
    return;
  }
  Queue* q = b->opr->prop == FnProperty::kAsync && !b->ctx.is_gpu() ? cpu_priority_queue_.get()
                                                                    : QueueFor(*b);
  // A worker of `q` between two functions (its completion made `b` ready) runs it next
  // itself when nothing else is queued: a dependency chain stays on one core.
  if (q == this_worker.queue && q->PushIfIdle(this_worker.index, b, b->priority)) return;
  q->Push(b, b->priority);
}

absl::StatusOr<OprBlock*> ThreadedEngine::NewOneShot(Context ctx,
                                                     absl::Span<const VarHandle> const_vars,
                                                     absl::Span<const VarHandle> mutate_vars,
                                                     FnProperty prop, int priority,
                                                     const char* name, bool profiling) {
  OprBlock* b = OprBlockPool::New();
  absl::Status s = PrepareOneShot(&b->one_shot, ctx, const_vars, mutate_vars, prop, name);
  if (!s.ok()) {
    OprBlockPool::Delete(b);
    return s;
  }
  b->opr = &b->one_shot;
  b->ctx = ctx;
  b->priority = priority;
  b->profiling = profiling;
  return b;
}

absl::Status ThreadedEngine::PushAsync(AsyncFn fn, Context ctx,
                                       absl::Span<const VarHandle> const_vars,
                                       absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                       int priority, const char* name, bool profiling) {
  absl::StatusOr<OprBlock*> b =
      NewOneShot(ctx, const_vars, mutate_vars, prop, priority, name, profiling);
  if (!b.ok()) return b.status();
  (*b)->one_shot.async_fn = std::move(fn);
  Schedule(*b);
  return absl::OkStatus();
}

absl::Status ThreadedEngine::PushSync(SyncFn fn, Context ctx,
                                      absl::Span<const VarHandle> const_vars,
                                      absl::Span<const VarHandle> mutate_vars, FnProperty prop,
                                      int priority, const char* name, bool profiling) {
  absl::StatusOr<OprBlock*> b =
      NewOneShot(ctx, const_vars, mutate_vars, prop, priority, name, profiling);
  if (!b.ok()) return b.status();
  (*b)->one_shot.sync_fn = std::move(fn);
  Schedule(*b);
  return absl::OkStatus();
}

absl::Status ThreadedEngine::Push(OprHandle op, Context ctx, int priority, bool profiling) {
  absl::StatusOr<Opr*> opr = AcquireOpr(op);
  if (!opr.ok()) return opr.status();
  if (absl::Status s = CheckContext(ctx, (*opr)->name); !s.ok()) {
    ReleaseOpr(*opr);
    return s;
  }
  auto* b = OprBlockPool::New();
  b->opr = *opr;
  b->prebuilt = true;
  b->ctx = ctx;
  b->priority = priority;
  b->profiling = profiling;
  Schedule(b);
  return absl::OkStatus();
}

void ThreadedEngine::Schedule(OprBlock* b, bool is_deletion) {
  const Opr& opr = *b->opr;
  const size_t nc = opr.const_vars.size();
  const size_t n = nc + opr.mutate_vars.size();
  pushed_.fetch_add(1, std::memory_order_seq_cst);
  if (n == 0) {  // nothing to wait for (and no block field to touch)
    Dispatch(b);
    return;
  }
  b->nodes.resize(n);  // sized once: nodes are linked into variable queues by address
  b->wait.store(static_cast<int>(n) + 1, std::memory_order_relaxed);

  int granted = 1;  // the push's own count
  // A lambda run under push_mu_ or not, rather than a lock taken on one path only: the
  // thread-safety analysis needs the lock held on every path or on none.
  const auto append_all = [&] {
    for (size_t i = 0; i < n; ++i) {
      VarNode& node = b->nodes[i];
      node.block = b;
      node.write = i >= nc;
      node.var = node.write ? opr.mutate_vars[i - nc] : opr.const_vars[i];
      SpinLockGuard guard(&node.var->lock);
      if (!is_deletion && node.var->deleted.load(std::memory_order_relaxed)) {
        // Deleted by another thread after this push validated it: fail the function.
        if (b->rejected == nullptr) {
          b->rejected = std::make_shared<ErrorRecord>(absl::InvalidArgumentError(absl::StrCat(
              "function '", opr.display_name(), "': a variable was deleted while it was pushed")));
        }
        ++granted;
        continue;
      }
      node.appended = true;
      if (Append(node.var, &node)) ++granted;
    }
  };
  if (n > 1) {
    MutexLock ordered(&push_mu_);
    append_all();
  } else {
    append_all();
  }
  if (b->wait.fetch_sub(granted, std::memory_order_acq_rel) == granted) Dispatch(b);
}

void ThreadedEngine::Execute(OprBlock* b, void* stream, int cpu_threads,
                             std::atomic<bool>* running) {
  // Cleared before the completion, which may make WaitForAll return and a caller push more:
  // the flag must not outlast the body (AllComputeWorkersBusy).
  const auto done_running = [running] {
    if (running != nullptr) running->store(false, std::memory_order_relaxed);
  };
  const Opr& opr = *b->opr;
  std::shared_ptr<ErrorRecord> inherited = b->rejected;
  if (inherited == nullptr && !opr.runs_despite_errors) inherited = InheritedError(opr);
  if (inherited != nullptr) {
    done_running();
    Complete(b, absl::OkStatus(), std::move(inherited));
    return;
  }
  if (stream != nullptr) b->stream = stream;  // null already: see OprBlock
  if (absl::Status s = WaitForGpuInputs(b, stream); !s.ok()) {
    done_running();
    Complete(b, s, nullptr);
    return;
  }
  if (profiler().ShouldRecord(b->profiling)) b->start_ns = Profiler::NowNs();
  FunctionScope scope;
  RunContext rctx{b->ctx, stream, cpu_threads};
  if (opr.sync_fn) {
    absl::Status status;
    {
      BodyScope body;
      status = RunSync(opr.sync_fn, rctx);
    }
    done_running();
    Complete(b, std::move(status), nullptr);
    return;
  }
  try {
    BodyScope body;
    // The callback may come before the function returns (a request refused at once) and
    // complete the block, which frees the function it belongs to: a one-shot function runs
    // moved out of its block, a pre-built operator with a reference of its own.
    Opr* const held = b->prebuilt ? b->opr : nullptr;
    if (held != nullptr) held->refs.fetch_add(1, std::memory_order_acq_rel);
    absl::Cleanup release = [this, held] {
      if (held != nullptr) ReleaseOpr(held);
    };
    if (held != nullptr) {
      held->async_fn(rctx, CreateCallback(&ThreadedEngine::OnAsyncComplete, b));
    } else {
      const AsyncFn fn = std::move(b->one_shot.async_fn);
      fn(rctx, CreateCallback(&ThreadedEngine::OnAsyncComplete, b));
    }
    done_running();
  } catch (const std::exception& e) {
    done_running();
    // By contract an asynchronous function that throws has not called its callback.
    Complete(b, absl::InternalError(absl::StrCat("exception: ", e.what())), nullptr);
  }
}

void ThreadedEngine::OnAsyncComplete(Engine* engine, void* param, absl::Status status) {
  static_cast<ThreadedEngine*>(engine)->Complete(static_cast<OprBlock*>(param),
                                                 std::move(status), nullptr);
}

void ThreadedEngine::Complete(OprBlock* b, absl::Status status,
                              std::shared_ptr<ErrorRecord> inherited) {
  const Opr& opr = *b->opr;
  if (status.ok() && inherited == nullptr && b->stream != nullptr) status = RecordGpuOutputs(b);
  if (b->start_ns != 0) {
    profiler().Record({opr.name, b->ctx, opr.prop, Profiler::ThisThreadId(), b->start_ns,
                       Profiler::NowNs()});
  }
  std::shared_ptr<ErrorRecord> error = OutcomeError(opr, status, std::move(inherited));
  const bool deletion = opr.prop == FnProperty::kDeleteVar;
  ReadyList ready;
  for (VarNode& node : b->nodes) {
    if (!node.appended) continue;
    if (node.write) node.var->set_error(error);  // before Release hands the variable on
    if (deletion) {
      {
        SpinLockGuard guard(&node.var->lock);
        node.var->running_write = false;
      }
      RecycleVar(node.var);
    } else {
      Release(node.var, node.write, &ready);
    }
  }
  if (b->prebuilt) ReleaseOpr(b->opr);
  OprBlockPool::Delete(b);
  for (OprBlock* r : ready) Grant(r);
  // seq_cst pairs with WaitForAll's increment of all_waiters_: one of the two sees the other.
  const int64_t completed = completed_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (all_waiters_.load(std::memory_order_seq_cst) > 0 &&
      pushed_.load(std::memory_order_seq_cst) == completed) {
    MutexLock guard(&wait_mu_);
    wait_cv_.SignalAll();
  }
}

absl::Status ThreadedEngine::DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) {
  if (absl::Status s = CheckContext(ctx, "DeleteVariable"); !s.ok()) return s;
  if (absl::Status s = MarkDeleted(var); !s.ok()) return s;
  auto* b = OprBlockPool::New();
  b->opr = &b->one_shot;
  b->one_shot.mutate_vars.push_back(var.var);
  b->one_shot.prop = FnProperty::kDeleteVar;
  b->one_shot.name = "DeleteVariable";
  b->one_shot.runs_despite_errors = true;
  b->one_shot.sync_fn =
      delete_fn ? std::move(delete_fn) : [](RunContext) { return absl::OkStatus(); };
  // Deletion runs on the CPU: a GPU-side delete function gets the context to act on.
  b->ctx = ctx.is_gpu() ? Context::CPU() : ctx;
  Schedule(b, /*is_deletion=*/true);
  return absl::OkStatus();
}

namespace {

// What a WaitForVar caller waits on.
struct VarWaiter {
  Mutex mu;
  CondVar cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::vector<GpuEventRef> gpu_events ABSL_GUARDED_BY(mu);
};

}  // namespace

absl::Status ThreadedEngine::WaitForVar(VarHandle var) {
  if (InEngineFunction()) {
    return absl::FailedPreconditionError(
        "WaitForVar called from inside an engine function (it would deadlock)");
  }
  VarWaiter waiter;
  Var* v = var.var;
  // A writer of `var`, so it runs after every earlier use, readers included.
  absl::StatusOr<OprBlock*> b = NewOneShot(Context::CPU(), {}, {var}, FnProperty::kAsync,
                                           /*priority=*/0, "WaitForVar", false);
  if (!b.ok()) return b.status();
  (*b)->one_shot.runs_despite_errors = true;
  (*b)->one_shot.sync_fn = [&waiter, v](RunContext) {
    ErrorRecord* e = v->pending_error();
    MutexLock guard(&waiter.mu);
    if (e != nullptr && e->TakeReport()) waiter.status = e->status;
    // GPU work on `var` may still be in flight: the caller synchronizes on it below,
    // off the engine's threads.
    if (GpuVarState* g = v->gpu.load(std::memory_order_acquire)) {
      SpinLockGuard var_guard(&v->lock);
      if (g->write) waiter.gpu_events.push_back(g->write);
      for (auto& r : g->reads) waiter.gpu_events.push_back(r);
    }
    waiter.done = true;
    waiter.cv.SignalAll();
    return absl::OkStatus();
  };
  Schedule(*b);
  MutexLock lock(&waiter.mu);
  while (!waiter.done) waiter.cv.Wait(&waiter.mu);
  for (const GpuEventRef& e : waiter.gpu_events) {
    if (absl::Status s = SyncEvent(*e); !s.ok() && waiter.status.ok()) waiter.status = s;
  }
  return waiter.status;
}

absl::Status ThreadedEngine::WaitForAll() {
  if (InEngineFunction()) {
    return absl::FailedPreconditionError(
        "WaitForAll called from inside an engine function (it would deadlock)");
  }
  // Help while waiting, as oneTBB's waiting thread does: while every compute worker is
  // busy, the caller runs queued CPU work instead of sleeping, on one OpenMP thread: the
  // workers' teams already have the cores. Not while a worker is free: it runs a large
  // kernel on its team (ops_bench: conv64 and fc4096 took 1.7-1.9x as long on the caller's
  // one thread), and a team of the caller's own would be a second OpenMP pool, which makes
  // libgomp throttle every pool's spin-waits.
  {
    ScopedOmpThreads one_thread(1);
    while (!Idle() && AllComputeWorkersBusy()) {
      OprBlock* b = cpu_queue_->TryPopNow();
      if (b == nullptr) break;
      Execute(b, nullptr, 1);
    }
  }
  all_waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    MutexLock lock(&wait_mu_);
    while (!Idle()) wait_cv_.Wait(&wait_mu_);
  }
  all_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  absl::Status gpu_status;
#if TESSERA_USE_CUDA
  std::vector<std::pair<int, void*>> streams;
  {
    MutexLock guard(&streams_mu_);
    streams = streams_;
  }
  for (auto [device, stream] : streams) {
    absl::Status s = CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                                "cudaStreamSynchronize", __FILE__, __LINE__);
    if (!s.ok() && gpu_status.ok()) gpu_status = s;
  }
#endif
  absl::Status failure = TakeUnreportedFailure();
  return failure.ok() ? gpu_status : failure;
}

bool ThreadedEngine::AllComputeWorkersBusy() const {
  for (int i = 0; i < num_compute_workers_; ++i) {
    if (!compute_running_[i].running.load(std::memory_order_relaxed)) return false;
  }
  return true;
}

absl::Status ThreadedEngine::WaitForGpuInputs(OprBlock* b, void* stream) {
  if (num_gpus() == 0) return absl::OkStatus();
  absl::InlinedVector<GpuEventRef, 4> events;
  for (VarNode& node : b->nodes) {
    GpuVarState* g = node.appended ? node.var->gpu.load(std::memory_order_acquire) : nullptr;
    if (g == nullptr) continue;
    SpinLockGuard guard(&node.var->lock);
    // Same-stream work is already ordered by the stream itself.
    auto other_stream = [&](const GpuEventRef& e) { return e && e->stream != stream; };
    if (other_stream(g->write)) events.push_back(g->write);
    if (node.write) {
      for (const GpuEventRef& r : g->reads) {
        if (other_stream(r)) events.push_back(r);
      }
    }
  }
  for (const GpuEventRef& e : events) {
    absl::Status s = stream != nullptr ? StreamWaitEvent(stream, *e) : SyncEvent(*e);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ThreadedEngine::RecordGpuOutputs(OprBlock* b) {
  absl::StatusOr<GpuEventRef> event = RecordEvent(b->stream, b->ctx.id);
  if (!event.ok()) return event.status();
  for (VarNode& node : b->nodes) {
    if (!node.appended) continue;
    SpinLockGuard guard(&node.var->lock);
    GpuVarState* g = node.var->gpu.load(std::memory_order_relaxed);
    if (g == nullptr) {
      g = new GpuVarState;
      node.var->gpu.store(g, std::memory_order_release);
    }
    if (node.write) {
      g->write = *event;
      g->reads.clear();
    } else {
      auto same = std::find_if(g->reads.begin(), g->reads.end(),
                               [&](const GpuEventRef& r) { return r->stream == b->stream; });
      if (same != g->reads.end()) {
        *same = *event;
      } else {
        g->reads.push_back(*event);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::engine::internal

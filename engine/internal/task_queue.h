// TaskQueue: the ready queue of one worker pool, ordered by priority then push order.
//
// Shared part: one FIFO per distinct priority (a RingQueue: no allocation per push or pop),
// kept sorted highest first, under a SpinLock; push and pop are O(1) for the usual handful
// of priorities. (A binary heap was O(log n)
// with a cache miss per level once a fast pusher had queued a million functions.)
//
// Run-ahead buffers: when the shared queue holds a backlog, a worker takes a batch of up to
// kMaxBatch items of the top priority (its fair share: the backlog divided by the workers)
// into its own buffer and runs them from there. One lock hand-over then serves a whole
// batch: with a lock round trip per item, pusher and worker spent most of their time
// bouncing the lock's cache line between the cores (engine_bench, independent workload).
// For the same reason a worker lets a short queue grow while a pusher is still adding to
// it (LetTheBatchGrow), and a completing worker keeps the function it made ready when it
// has nothing else queued (PushIfIdle). The buffers keep the queue's guarantees:
//   - priority: before each buffered item the worker checks whether the shared queue now
//     holds a more urgent one (a hint, `top_priority_`, then a locked check) and runs that
//     first; equal priorities stay in push order, as the batch was taken from the front;
//   - progress: an idle worker steals half of a busy peer's buffer, so a function that
//     blocks never holds ready work hostage while other workers idle; a worker never
//     sleeps while any buffer holds items (Dekker on `count` and `sleepers_`).
//
// Workers that find no work spin for `spin_us` before sleeping: waking a sleeping thread
// costs tens of microseconds on these machines, far more than the functions the engine
// usually runs, so a worker that is about to get more work should not sleep. The mutex
// and condition variable are only for sleeping; pushers touch them only when some worker
// really sleeps. `size_`, `sleepers_` and the buffers' `count`s are seq_cst where they pair
// up, so that a pusher (or a worker that buffered items) either sees a sleeper or the
// sleeper sees the new items (no lost wake-up).
//
// Thread-safe; blocks in Pop only. Worker i (0 <= i < workers) calls Pop(i) from one thread.
#ifndef TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_
#define TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
#include "engine/internal/ring_queue.h"
#include "engine/internal/spin_lock.h"

namespace tessera::engine::internal {

template <typename T>
class TaskQueue {
 public:
  // The most items a worker takes from the shared queue at once. It bounds how long a
  // buffered item can wait behind its batch-mates.
  static constexpr int kMaxBatch = 16;
  // The longest pause, in CpuRelax()s, between two looks at an empty queue (about a
  // microsecond: far below the cost of waking a sleeping thread).
  static constexpr int kMaxBackoff = 256;
  // The longest wait, in CpuRelax()s, for a short shared queue to grow before a worker
  // with an empty buffer takes from it (about 0.8 us on this VM's AMD EPYC cores; see
  // LetTheBatchGrow).
  static constexpr int kRefillPause = 32;

  TaskQueue(int spin_us, int workers) : spin_(std::chrono::microseconds(spin_us)) {
    for (int i = 0; i < std::max(1, workers); ++i) buffers_.push_back(std::make_unique<Buffer>());
  }

  void Push(T* item, int priority) {
    {
      SpinLockGuard guard(&heap_lock_);
      // While the queue is non-empty `top_priority_` is exact; written only on change.
      const bool was_empty = size_.load(std::memory_order_relaxed) == 0;
      if (was_empty || priority > top_priority_.load(std::memory_order_relaxed)) {
        SetTop(priority);
      }
      BucketFor(priority).push_back(item);
      size_.fetch_add(1, std::memory_order_seq_cst);
    }
    if (sleepers_.load(std::memory_order_seq_cst) > 0) WakeOne();
  }

  // For worker `w`'s own thread, on its way back to Pop(w): `item` becomes its next item,
  // bypassing the shared queue, when nothing else is ready (its buffer and the shared
  // queue are empty, so no queued item of the same priority is overtaken). False, and
  // nothing done, otherwise. This is how a dependency chain continues on the worker that
  // ran its previous link, without the shared queue's lock and counters, which pushing
  // threads write too. No peer is woken: the caller runs the item next.
  bool PushIfIdle(int w, T* item, int priority) {
    Buffer& self = *buffers_[w];
    // Only the owner adds to its buffer, so an empty one stays empty until it does.
    if (self.count.load(std::memory_order_relaxed) > 0 ||
        size_.load(std::memory_order_relaxed) > 0) {
      return false;
    }
    SpinLockGuard guard(&self.lock);
    self.items[0] = item;
    self.priority = priority;
    self.head = 0;
    self.tail = 1;
    self.count.store(1, std::memory_order_seq_cst);
    return true;
  }

  // The next item for worker `w`, waiting for one; nullptr once shut down and drained.
  T* Pop(int w) {
    Buffer& self = *buffers_[w];
    // The clock is read only once the queue stays empty: a read per item took a quarter
    // of the worker's time (engine_bench, `perf record`: 12% of all samples).
    std::chrono::steady_clock::time_point deadline;
    if (self.count.load(std::memory_order_relaxed) == 0) LetTheBatchGrow();
    // Looks at the queue less and less often while it stays empty: each look pulls the
    // line a pusher is writing, and a worker that snatches every item the moment it
    // appears makes the pusher fight it for the lock once per item; a worker that comes
    // back a little later takes a batch in one go.
    int backoff = 1;
    for (int spins = 0;; ++spins) {
      if (T* item = Next(self, w)) return item;
      if (stopping_.load(std::memory_order_relaxed)) break;
      if (spins < 12) {
        for (int i = 0; i < backoff; ++i) CpuRelax();
        backoff = std::min(2 * backoff, kMaxBackoff);
        continue;
      }
      if (spins == 12) deadline = std::chrono::steady_clock::now() + spin_;
      sched_yield();
      if ((spins & 15) == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    for (;;) {
      if (T* item = Next(self, w)) return item;
      MutexLock lock(&mu_);
      // Peers run their own buffers before they exit.
      if (shutdown_ && size_.load(std::memory_order_seq_cst) == 0) return nullptr;
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (size_.load(std::memory_order_seq_cst) == 0 && !AnyBuffered() && !shutdown_) {
        cv_.Wait(&mu_);
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // The highest-priority item of the shared queue if there is one now; never blocks (for
  // threads that help while they wait; workers' buffers are theirs to run).
  T* TryPopNow() {
    return size_.load(std::memory_order_relaxed) > 0 ? TryPopAbove(INT_MIN) : nullptr;
  }

  // Wakes every worker; Pop returns nullptr once the queue is empty.
  void Shutdown() {
    {
      MutexLock guard(&mu_);
      shutdown_ = true;
    }
    stopping_.store(true, std::memory_order_relaxed);
    cv_.SignalAll();
  }

 private:
  struct Bucket {
    int priority;
    RingQueue<T*> items;
  };

  // One worker's run-ahead batch, items [head, tail) of one priority in push order. The
  // owner takes from the front, thieves from the back, both under `lock`; `count` mirrors
  // tail - head for lock-free looks.
  struct alignas(64) Buffer {
    SpinLock lock;
    // Written under `lock` by the owner only, which also reads it unlocked (Next).
    int priority = 0;
    int head ABSL_GUARDED_BY(lock) = 0;
    int tail ABSL_GUARDED_BY(lock) = 0;
    T* items[kMaxBatch] ABSL_GUARDED_BY(lock);
    std::atomic<int> count{0};
  };

  // Before taking a short queue: while a pusher keeps adding to it, wait a little (up to
  // kRefillPause CpuRelax()es, looking every 8) so that the batch grows; as soon as it
  // stops growing, go. A worker that came back the moment it ran dry took a few items per
  // refill and pulled the queue's lines from the pusher every time: engine_bench,
  // independent workload, 162-198 ns per function before, 104-117 after (same runs,
  // binaries alternating). Chains do not pay for it: their next link is kept on the worker
  // (PushIfIdle).
  void LetTheBatchGrow() {
    size_t seen = size_.load(std::memory_order_relaxed);
    for (int paused = 0; paused < kRefillPause && seen < kMaxBatch; paused += 8) {
      for (int i = 0; i < 8; ++i) CpuRelax();
      const size_t now = size_.load(std::memory_order_relaxed);
      if (now == seen) return;
      seen = now;
    }
  }

  // Own buffer first, unless the shared queue now holds something more urgent; else a
  // batch from the shared queue; else half of a peer's buffer.
  T* Next(Buffer& self, int w) {
    if (self.count.load(std::memory_order_relaxed) > 0) {
      if (size_.load(std::memory_order_relaxed) > 0 &&
          top_priority_.load(std::memory_order_relaxed) > self.priority) {
        if (T* item = TryPopAbove(self.priority)) return item;
      }
      if (T* item = TakeFront(self)) return item;
    }
    if (size_.load(std::memory_order_relaxed) > 0) {
      if (T* item = Refill(self)) return item;
    }
    return Steal(self, w);
  }

  T* TakeFront(Buffer& b) {
    SpinLockGuard guard(&b.lock);
    if (b.head == b.tail) return nullptr;
    T* item = b.items[b.head++];
    b.count.store(b.tail - b.head, std::memory_order_relaxed);
    return item;
  }

  // Takes this worker's share of the top bucket: the first item to run, the rest buffered.
  T* Refill(Buffer& self) {
    T* batch[kMaxBatch];
    int n = 0, priority = 0;
    {
      SpinLockGuard guard(&heap_lock_);
      const size_t size = size_.load(std::memory_order_relaxed);
      if (size == 0) return nullptr;
      Bucket* top = TopBucket();
      const size_t share = std::clamp<size_t>(size / buffers_.size(), 1, kMaxBatch);
      n = static_cast<int>(std::min(share, top->items.size()));
      priority = top->priority;
      PopFront(top, n, batch);
    }
    Keep(self, batch + 1, n - 1, priority);
    return batch[0];
  }

  // Half (rounded up) of the fullest-found peer buffer, from its back: one item to run,
  // the rest into this worker's buffer.
  T* Steal(Buffer& self, int w) {
    const int n = static_cast<int>(buffers_.size());
    for (int i = 1; i < n; ++i) {
      Buffer& victim = *buffers_[(w + i) % n];
      if (victim.count.load(std::memory_order_relaxed) == 0) continue;
      T* taken[kMaxBatch];
      int k = 0, priority = 0;
      {
        SpinLockGuard guard(&victim.lock);
        k = (victim.tail - victim.head + 1) / 2;
        if (k == 0) continue;
        priority = victim.priority;
        victim.tail -= k;
        std::copy(victim.items + victim.tail, victim.items + victim.tail + k, taken);
        victim.count.store(victim.tail - victim.head, std::memory_order_relaxed);
      }
      Keep(self, taken + 1, k - 1, priority);
      return taken[0];
    }
    return nullptr;
  }

  // Fills this worker's (empty) buffer with `n` items of `priority`, in order.
  void Keep(Buffer& self, T* const* items, int n, int priority) {
    if (n == 0) return;
    {
      SpinLockGuard guard(&self.lock);
      std::copy(items, items + n, self.items);
      self.priority = priority;
      self.head = 0;
      self.tail = n;
      self.count.store(n, std::memory_order_seq_cst);
    }
    // A sleeping peer may take part of them (see the header).
    if (sleepers_.load(std::memory_order_seq_cst) > 0) WakeOne();
  }

  // The front of the top bucket if its priority is above `floor`.
  T* TryPopAbove(int floor) {
    SpinLockGuard guard(&heap_lock_);
    if (size_.load(std::memory_order_relaxed) == 0) return nullptr;
    Bucket* top = TopBucket();
    if (top->priority <= floor) return nullptr;
    T* item;
    PopFront(top, 1, &item);
    return item;
  }

  // Moves the first `n` items of `top` to `out`, keeping the counts and the hint exact.
  void PopFront(Bucket* top, int n, T** out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(heap_lock_) {
    for (int i = 0; i < n; ++i) {
      out[i] = top->items.front();
      top->items.pop_front();
    }
    size_.fetch_sub(n, std::memory_order_seq_cst);
    AfterPop(top);
  }

  bool AnyBuffered() const {
    for (const auto& b : buffers_) {
      if (b->count.load(std::memory_order_seq_cst) > 0) return true;
    }
    return false;
  }

  void WakeOne() {
    // Taking the mutex orders this notify after a sleeper's last look at the queue.
    MutexLock guard(&mu_);
    cv_.Signal();
  }

  // The highest non-empty bucket; the queue must not be empty.
  Bucket* TopBucket() ABSL_EXCLUSIVE_LOCKS_REQUIRED(heap_lock_) {
    for (Bucket& b : buckets_) {
      if (!b.items.empty()) return &b;
    }
    return nullptr;
  }

  // Keeps `top_priority_` exact after a pop from `from`, while items remain.
  void AfterPop(Bucket* from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(heap_lock_) {
    if (!from->items.empty() || size_.load(std::memory_order_relaxed) == 0) return;
    SetTop(TopBucket()->priority);
  }

  void SetTop(int priority) ABSL_EXCLUSIVE_LOCKS_REQUIRED(heap_lock_) {
    if (top_priority_.load(std::memory_order_relaxed) != priority) {
      top_priority_.store(priority, std::memory_order_relaxed);
    }
  }

  RingQueue<T*>& BucketFor(int priority) ABSL_EXCLUSIVE_LOCKS_REQUIRED(heap_lock_) {
    auto it = std::lower_bound(buckets_.begin(), buckets_.end(), priority,
                               [](const Bucket& b, int p) { return b.priority > p; });
    if (it == buckets_.end() || it->priority != priority) {
      // Drop drained buckets first so odd priorities do not accumulate.
      if (buckets_.size() >= 8) {
        buckets_.erase(std::remove_if(buckets_.begin(), buckets_.end(),
                                      [](const Bucket& b) { return b.items.empty(); }),
                       buckets_.end());
        it = std::lower_bound(buckets_.begin(), buckets_.end(), priority,
                              [](const Bucket& b, int p) { return b.priority > p; });
      }
      it = buckets_.insert(it, Bucket{priority, {}});
    }
    return it->items;
  }

  const std::chrono::nanoseconds spin_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // one per worker, fixed at construction
  // Hot fields on separate cache lines: the spinning workers' reads of `size_` must not
  // bounce the line the pusher is writing the lock and buckets on.
  alignas(64) SpinLock heap_lock_;
  std::vector<Bucket> buckets_ ABSL_GUARDED_BY(heap_lock_);  // highest priority first
  alignas(64) Mutex mu_;  // for sleeping only
  CondVar cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  alignas(64) std::atomic<size_t> size_{0};  // items in the shared queue (not in buffers)
  // The top bucket's priority while the shared queue is non-empty (a hint for workers
  // running buffered items); written under heap_lock_, only when it changes.
  alignas(64) std::atomic<int> top_priority_{INT_MIN};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_

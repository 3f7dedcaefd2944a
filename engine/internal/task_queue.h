// TaskQueue: the ready queue of one worker pool, ordered by priority then push order.
//
// One FIFO per distinct priority, kept sorted highest first: push and pop are O(1) for
// the usual handful of priorities. (A binary heap was O(log n) with a cache miss per level
// once a fast pusher had queued a million functions.)
//
// Workers that find the queue empty spin for `spin_us` before sleeping: waking a sleeping
// thread costs tens of microseconds on these machines, far more than the functions the
// engine usually runs, so a worker that is about to get more work should not sleep.
// The heap is guarded by a SpinLock (a few dozen instructions per operation); the mutex
// and condition variable are only for sleeping, and pushers touch them only when some
// worker really sleeps. `size_` and `sleepers_` are seq_cst so that a pusher either sees
// a sleeper or the sleeper sees the new item (no lost wake-up).
//
// Thread-safe; blocks in Pop only.
#ifndef TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_
#define TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/internal/spin_lock.h"

namespace tessera::engine::internal {

template <typename T>
class TaskQueue {
 public:
  explicit TaskQueue(int spin_us) : spin_(std::chrono::microseconds(spin_us)) {}

  void Push(T* item, int priority) {
    {
      std::lock_guard<SpinLock> guard(heap_lock_);
      BucketFor(priority).push_back(item);
      size_.fetch_add(1, std::memory_order_seq_cst);
    }
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      // Taking the mutex orders this notify after a sleeper's last look at `size_`.
      std::lock_guard<std::mutex> guard(mu_);
      cv_.notify_one();
    }
  }

  // The highest-priority item, waiting for one; nullptr once shut down and drained.
  T* Pop() {
    const auto deadline = std::chrono::steady_clock::now() + spin_;
    for (int spins = 0;; ++spins) {
      // relaxed: only a hint; the pop itself happens under the mutex.
      if (size_.load(std::memory_order_relaxed) > 0) {
        if (T* item = TryPop()) return item;
      }
      if (stopping_.load(std::memory_order_relaxed)) break;
      if (spins < 32) {
        CpuRelax();
        continue;
      }
      sched_yield();
      if ((spins & 15) == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    for (;;) {
      if (T* item = TryPop()) return item;
      std::unique_lock<std::mutex> lock(mu_);
      if (shutdown_ && size_.load(std::memory_order_seq_cst) == 0) return nullptr;
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (size_.load(std::memory_order_seq_cst) == 0 && !shutdown_) cv_.wait(lock);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // The highest-priority item if there is one now; never blocks.
  T* TryPopNow() { return size_.load(std::memory_order_relaxed) > 0 ? TryPop() : nullptr; }

  // Wakes every worker; Pop returns nullptr once the queue is empty.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> guard(mu_);
      shutdown_ = true;
    }
    stopping_.store(true, std::memory_order_relaxed);
    cv_.notify_all();
  }

 private:
  struct Bucket {
    int priority;
    std::deque<T*> items;
  };

  std::deque<T*>& BucketFor(int priority) ABSL_EXCLUSIVE_LOCKS_REQUIRED(heap_lock_) {
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

  T* TryPop() {
    std::lock_guard<SpinLock> guard(heap_lock_);
    for (Bucket& b : buckets_) {
      if (b.items.empty()) continue;
      T* item = b.items.front();
      b.items.pop_front();
      size_.fetch_sub(1, std::memory_order_seq_cst);
      return item;
    }
    return nullptr;
  }

  const std::chrono::nanoseconds spin_;
  // Hot fields on separate cache lines: the spinning workers' reads of `size_` must not
  // bounce the line the pusher is writing the lock and buckets on.
  alignas(64) SpinLock heap_lock_;
  std::vector<Bucket> buckets_ ABSL_GUARDED_BY(heap_lock_);  // highest priority first
  alignas(64) std::mutex mu_;  // for sleeping only
  std::condition_variable cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  alignas(64) std::atomic<size_t> size_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_

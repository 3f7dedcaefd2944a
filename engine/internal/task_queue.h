// TaskQueue: the ready queue of one worker pool, ordered by priority then push order.
//
// Workers that find the queue empty spin for `spin_us` before sleeping: waking a sleeping
// thread costs tens of microseconds on these machines, far more than the functions the
// engine usually runs, so a worker that is about to get more work should not sleep.
// Pushers only touch the condition variable when some worker really sleeps.
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
    bool wake;
    {
      std::lock_guard<std::mutex> guard(mu_);
      heap_.push_back({priority, next_seq_++, item});
      std::push_heap(heap_.begin(), heap_.end());
      size_.fetch_add(1, std::memory_order_relaxed);
      wake = sleepers_ > 0;
    }
    if (wake) cv_.notify_one();
  }

  // The highest-priority item, waiting for one; nullptr once shut down and drained.
  T* Pop() {
    const auto deadline = std::chrono::steady_clock::now() + spin_;
    for (int spins = 0;; ++spins) {
      // relaxed: only a hint; the pop itself happens under the mutex.
      if (size_.load(std::memory_order_relaxed) > 0) {
        std::lock_guard<std::mutex> guard(mu_);
        if (!heap_.empty()) return PopLocked();
      }
      if (stopping_.load(std::memory_order_relaxed)) break;
      if (spins < 32) {
        CpuRelax();
        continue;
      }
      sched_yield();
      if ((spins & 15) == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    std::unique_lock<std::mutex> lock(mu_);
    while (heap_.empty() && !shutdown_) {
      ++sleepers_;
      cv_.wait(lock);
      --sleepers_;
    }
    return heap_.empty() ? nullptr : PopLocked();
  }

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
  struct Entry {
    int priority;
    uint64_t seq;
    T* item;
    // std heaps are max-heaps: higher priority first, then the earlier push.
    bool operator<(const Entry& o) const {
      return priority != o.priority ? priority < o.priority : seq > o.seq;
    }
  };

  T* PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::pop_heap(heap_.begin(), heap_.end());
    T* item = heap_.back().item;
    heap_.pop_back();
    size_.fetch_sub(1, std::memory_order_relaxed);
    return item;
  }

  const std::chrono::nanoseconds spin_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> heap_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<size_t> size_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_TASK_QUEUE_H_

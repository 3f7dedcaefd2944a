// RingQueue: a FIFO on one power-of-two ring that doubles when full and reuses its slots,
// for the ready queue's per-priority buckets.
//
// Why not std::deque: it allocates a chunk every 64 pushes and frees one every 64 pops.
// The pusher allocated and the worker freed, inside the queue's lock, in each other's
// malloc arenas: glibc's arena lock then serialized them, the lock holder slept in a futex
// and the other side spun on the queue lock and yielded (engine_bench, independent
// workload: about a third of the samples). A ring allocates only when it grows.
//
// Not thread-safe (the TaskQueue's lock guards it).
#ifndef TESSERA_ENGINE_INTERNAL_RING_QUEUE_H_
#define TESSERA_ENGINE_INTERNAL_RING_QUEUE_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tessera::engine::internal {

template <typename T>
class RingQueue {
 public:
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  size_t capacity() const { return slots_.size(); }

  void push_back(T value) {
    if (size() == slots_.size()) Grow();
    slots_[tail_++ & (slots_.size() - 1)] = value;
  }
  // Requires !empty().
  T& front() { return slots_[head_ & (slots_.size() - 1)]; }
  void pop_front() {
    if (++head_ != tail_) return;
    // Drained. A ring that a burst made large gives its memory back; a small one starts
    // over at slot 0, so a queue that holds one item at a time (a dependency chain) keeps
    // using the same, cached, slot instead of walking through the whole ring.
    if (slots_.size() > kKeptSlots) {
      *this = RingQueue();
    } else {
      head_ = tail_ = 0;
    }
  }

 private:
  static constexpr size_t kMinSlots = 64;
  static constexpr size_t kKeptSlots = 1 << 16;

  void Grow() {
    std::vector<T> bigger(std::max(kMinSlots, 2 * slots_.size()));
    for (size_t i = head_; i != tail_; ++i) bigger[i - head_] = slots_[i & (slots_.size() - 1)];
    tail_ -= head_;
    head_ = 0;
    slots_.swap(bigger);
  }

  std::vector<T> slots_;
  // Positions count up without wrapping (size_t does not overflow in practice); a slot is
  // the position modulo the capacity.
  size_t head_ = 0;
  size_t tail_ = 0;
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_RING_QUEUE_H_

// SlabPool<T>: stable-address object slots with a free list, for Var and Opr.
//
// Slots are never returned to the system while the pool lives, so a stale handle can
// always be checked against the slot's generation without touching freed memory.
// Thread-safe: Acquire/Release take a mutex (object creation is not the engine's hot path
// for temporaries; those live in OprBlocks).
#ifndef TESSERA_ENGINE_INTERNAL_VAR_POOL_H_
#define TESSERA_ENGINE_INTERNAL_VAR_POOL_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"

namespace tessera::engine::internal {

// T needs `T* next_free` and `std::atomic<uint32_t> generation`.
template <typename T>
class SlabPool {
 public:
  SlabPool() = default;
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  T* Acquire() {
    MutexLock guard(&mu_);
    if (free_ == nullptr) Grow();
    T* t = free_;
    free_ = t->next_free;
    t->next_free = nullptr;
    ++live_;
    return t;
  }

  // The caller has reset the object's state; the generation bump invalidates handles.
  void Release(T* t) {
    t->generation.fetch_add(1, std::memory_order_acq_rel);
    MutexLock guard(&mu_);
    t->next_free = free_;
    free_ = t;
    --live_;
  }

  size_t live() const {
    MutexLock guard(&mu_);
    return live_;
  }

 private:
  static constexpr size_t kSlabSize = 256;

  void Grow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    slabs_.push_back(std::make_unique<T[]>(kSlabSize));
    T* slab = slabs_.back().get();
    for (size_t i = kSlabSize; i-- > 0;) {
      slab[i].next_free = free_;
      free_ = &slab[i];
    }
  }

  mutable Mutex mu_;
  std::vector<std::unique_ptr<T[]>> slabs_ ABSL_GUARDED_BY(mu_);
  T* free_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_VAR_POOL_H_

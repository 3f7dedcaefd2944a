// SpinLock: a tiny test-and-test-and-set lock for the engine's per-variable critical
// sections, which are a few dozen instructions long.
//
// Why not std::mutex: one per variable would cost 40 bytes and a futex round trip under
// contention; why not absl::Mutex: Debian's Abseil is not built with ThreadSanitizer, so
// TSan could not see its synchronization. Plain std::atomic is understood by TSan. After a
// short spin the lock yields the CPU, so a preempted holder on this 2-core machine gets
// to run instead of being spun against.
//
// Annotated for clang's thread-safety analysis (core/mutex.h says why): hold it with
// SpinLockGuard, and data it protects can be ABSL_GUARDED_BY it.
#ifndef TESSERA_ENGINE_INTERNAL_SPIN_LOCK_H_
#define TESSERA_ENGINE_INTERNAL_SPIN_LOCK_H_

#include <sched.h>

#include <atomic>

#include "absl/base/thread_annotations.h"

namespace tessera::engine::internal {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class ABSL_LOCKABLE SpinLock {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int spins = 0;; ++spins) {
      // acquire: everything the previous holder wrote before unlock() is visible.
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          CpuRelax();
        } else {
          sched_yield();
        }
      }
    }
  }
  void unlock() ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Holds `lock` for its scope.
class ABSL_SCOPED_LOCKABLE SpinLockGuard {
 public:
  explicit SpinLockGuard(SpinLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_->lock();
  }
  ~SpinLockGuard() ABSL_UNLOCK_FUNCTION() { lock_->unlock(); }
  SpinLockGuard(const SpinLockGuard&) = delete;
  SpinLockGuard& operator=(const SpinLockGuard&) = delete;

 private:
  SpinLock* const lock_;
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_SPIN_LOCK_H_

// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's
// thread-safety annotations, so that ABSL_GUARDED_BY and ABSL_EXCLUSIVE_LOCKS_REQUIRED are
// checked at compile time (tests/core:thread_safety_test builds with -Wthread-safety
// -Werror). leveldb's port::Mutex pattern: a thin wrapper that ThreadSanitizer still sees as
// the std::mutex it is (absl::Mutex is invisible to it in Debian's uninstrumented build).
//
//   Mutex mu_;
//   int count_ ABSL_GUARDED_BY(mu_);
//   CondVar changed_;
//   ...
//   MutexLock lock(&mu_);
//   while (count_ == 0) changed_.Wait(&mu_);
//
// A wait is a loop over its condition, not a predicate lambda: the analysis cannot see that
// a lambda runs with the lock held.
#ifndef TESSERA_CORE_MUTEX_H_
#define TESSERA_CORE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

// An exclusive release, not ABSL_UNLOCK_FUNCTION's generic one: clang takes back at a
// scope's end only what was released exclusively (or shared).
#if defined(__clang__)
#define TESSERA_RELEASE_CAPABILITY(x) __attribute__((release_capability(x)))
#else
#define TESSERA_RELEASE_CAPABILITY(x)
#endif

namespace tessera {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Releases a held `mu` for its scope (a call that must not run under the lock), and takes
// it again at the end.
class ABSL_SCOPED_LOCKABLE MutexUnlock {
 public:
  explicit MutexUnlock(Mutex* mu) TESSERA_RELEASE_CAPABILITY(mu) : mu_(mu) { mu_->Unlock(); }
  ~MutexUnlock() ABSL_UNLOCK_FUNCTION() { mu_->Lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable waited on with a Mutex held.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu`, waits for a signal (or a spurious wake-up), and holds `mu` again.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }

  // As Wait, until `deadline` at the latest; false when the deadline passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_MUTEX_H_

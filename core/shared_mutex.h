// SharedMutex: a reader/writer lock whose waiting writer holds back new readers.
//
// std::shared_mutex (glibc's default rwlock) lets readers in while a writer waits, so a
// steady overlap of short readers - a parameter server's streams pushing keys - can keep a
// writer - a worker joining the barrier or leaving - waiting indefinitely. With glibc's
// writer-preferring kind a waiting writer gets the lock once the readers inside leave.
// That kind deadlocks a thread that takes the shared lock twice while a writer waits: never
// nest shared locks of one SharedMutex.
//
// Annotated for clang's thread-safety analysis (core/mutex.h says why); hold it with
// WriterLock or ReaderLock. It still meets the SharedMutex requirements of the standard.
#ifndef TESSERA_CORE_SHARED_MUTEX_H_
#define TESSERA_CORE_SHARED_MUTEX_H_

#include <pthread.h>

#include "absl/base/thread_annotations.h"

namespace tessera {

class ABSL_LOCKABLE SharedMutex {
 public:
  SharedMutex();
  ~SharedMutex();
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true);
  void unlock() ABSL_UNLOCK_FUNCTION();
  void lock_shared() ABSL_SHARED_LOCK_FUNCTION();
  bool try_lock_shared() ABSL_SHARED_TRYLOCK_FUNCTION(true);
  void unlock_shared() ABSL_UNLOCK_FUNCTION();

 private:
  pthread_rwlock_t rwlock_;
};

// Holds `mu` exclusively for its scope.
class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds `mu` shared for its scope.
class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->lock_shared();
  }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_SHARED_MUTEX_H_

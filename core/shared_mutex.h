// SharedMutex: a reader/writer lock whose waiting writer holds back new readers.
//
// std::shared_mutex (glibc's default rwlock) lets readers in while a writer waits, so a
// steady overlap of short readers - a parameter server's streams pushing keys - can keep a
// writer - a worker joining the barrier or leaving - waiting indefinitely. With glibc's
// writer-preferring kind a waiting writer gets the lock once the readers inside leave.
// That kind deadlocks a thread that takes the shared lock twice while a writer waits: never
// nest shared locks of one SharedMutex.
//
// Meets the SharedMutex requirements, so std::unique_lock and std::shared_lock take it.
#ifndef TESSERA_CORE_SHARED_MUTEX_H_
#define TESSERA_CORE_SHARED_MUTEX_H_

#include <pthread.h>

namespace tessera {

class SharedMutex {
 public:
  SharedMutex();
  ~SharedMutex();
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock();
  bool try_lock();
  void unlock();
  void lock_shared();
  bool try_lock_shared();
  void unlock_shared();

 private:
  pthread_rwlock_t rwlock_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_SHARED_MUTEX_H_

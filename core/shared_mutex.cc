#include "core/shared_mutex.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace tessera {
namespace {

// A failing rwlock call is a bug (uninitialized, unlocked by a non-owner, nested): stop.
void Check(int error, const char* call) {
  if (error == 0) return;
  std::fprintf(stderr, "SharedMutex: %s failed with error %d\n", call, error);
  std::abort();
}

}  // namespace

SharedMutex::SharedMutex() {
  pthread_rwlockattr_t attr;
  Check(pthread_rwlockattr_init(&attr), "pthread_rwlockattr_init");
  Check(pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP),
        "pthread_rwlockattr_setkind_np");
  Check(pthread_rwlock_init(&rwlock_, &attr), "pthread_rwlock_init");
  pthread_rwlockattr_destroy(&attr);
}

SharedMutex::~SharedMutex() { pthread_rwlock_destroy(&rwlock_); }

void SharedMutex::lock() { Check(pthread_rwlock_wrlock(&rwlock_), "pthread_rwlock_wrlock"); }

bool SharedMutex::try_lock() {
  const int error = pthread_rwlock_trywrlock(&rwlock_);
  if (error == EBUSY) return false;
  Check(error, "pthread_rwlock_trywrlock");
  return true;
}

void SharedMutex::unlock() { Check(pthread_rwlock_unlock(&rwlock_), "pthread_rwlock_unlock"); }

void SharedMutex::lock_shared() { Check(pthread_rwlock_rdlock(&rwlock_), "pthread_rwlock_rdlock"); }

bool SharedMutex::try_lock_shared() {
  const int error = pthread_rwlock_tryrdlock(&rwlock_);
  if (error == EBUSY || error == EAGAIN) return false;
  Check(error, "pthread_rwlock_tryrdlock");
  return true;
}

void SharedMutex::unlock_shared() { unlock(); }

}  // namespace tessera

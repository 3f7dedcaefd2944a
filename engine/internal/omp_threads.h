// OpenMP thread counts of the engine's threads. oneDNN's CPU kernels run their parallel
// regions on OpenMP, and omp_set_num_threads is per calling thread, so each engine thread
// sets its own: compute workers share the process's CPUs among them, every other thread that
// runs functions (the priority and GPU workers, a caller helping in WaitForAll) uses 1, as a
// second team would oversubscribe the cores the compute workers' teams already hold.
#ifndef TESSERA_ENGINE_INTERNAL_OMP_THREADS_H_
#define TESSERA_ENGINE_INTERNAL_OMP_THREADS_H_

namespace tessera::engine::internal {

// The OpenMP threads of each of `workers` compute workers: `requested` when > 0, else
// OMP_NUM_THREADS when the environment sets it (as MXNet honours it), else the process's
// CPUs (AvailableCpus) but the pushing thread's one, shared among the workers, at least 1.
// (On a 2-CPU machine a team of two beside the pusher trained up to 2x slower: between
// kernels libgomp's threads stopped spinning, and each region paid futex wake-ups.)
int ResolveOmpThreadsPerWorker(int requested, int workers);

// Sets the calling thread's OpenMP threads for the parallel regions it starts.
void SetOmpThreadsOfThisThread(int threads);

// The calling thread's OpenMP threads set to `threads` for its lifetime, then restored.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_OMP_THREADS_H_

// OpenMP thread counts of the engine's threads and of the kernels their functions run.
// oneDNN's CPU kernels run their parallel regions on OpenMP, and omp_set_num_threads is per
// calling thread, so each engine thread sets its own: compute workers share the process's
// CPUs among them, every other thread that runs functions (the priority and GPU workers, a
// caller helping in WaitForAll) uses 1, as a second team would oversubscribe the cores the
// compute workers' teams already hold.
//
// A function may run one large kernel on more threads than its worker's default
// (RunContext::cpu_threads): on a 2-CPU machine the one compute worker leaves a CPU to the
// pushing thread, which sits idle while it waits for a convolution's result.
#ifndef TESSERA_ENGINE_OMP_THREADS_H_
#define TESSERA_ENGINE_OMP_THREADS_H_

#include <cstdint>

namespace tessera::engine {

// The OpenMP threads of each of `workers` compute workers: `requested` when > 0, else
// OMP_NUM_THREADS when the environment sets it (as MXNet honours it), else the process's
// CPUs (AvailableCpus) but the pushing thread's one, shared among the workers, at least 1.
// (On a 2-CPU machine a team of two beside the pusher trained up to 2x slower: between
// kernels libgomp's threads stopped spinning, and each region paid futex wake-ups.)
int ResolveOmpThreadsPerWorker(int requested, int workers);

// The threads one large kernel of a compute worker's function may use
// (RunContext::cpu_threads): as ResolveOmpThreadsPerWorker when `requested` or
// OMP_NUM_THREADS decide, else all the process's CPUs shared among the workers, the
// pusher's included.
int ResolveCpuThreadsPerFunction(int requested, int workers);

// The threads a kernel of `flops` floating-point operations should run on, at most
// `cpu_threads`: one more thread per kFlopsPerThread of work, so that a kernel wakes a
// sleeping thread (tens of microseconds on a VM) only when it has at least ~100 us of work
// to give it. Small kernels stay on the calling thread and never start a team.
inline constexpr double kFlopsPerThread = 4e6;
int ThreadsForWork(double flops, int cpu_threads);
// The same for a kernel bound by memory rather than arithmetic (element-wise, softmax,
// batch norm), from the bytes its tensors hold: one more thread per kBytesPerThread, about
// 100 us of one core's memory bandwidth.
inline constexpr double kBytesPerThread = 1e6;
int ThreadsForBytes(double bytes, int cpu_threads);

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

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_OMP_THREADS_H_

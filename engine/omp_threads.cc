#include "engine/omp_threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include "core/cpu_count.h"

namespace tessera::engine {
namespace {

bool OmpNumThreadsSet() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  return env != nullptr && *env != '\0';
}

}  // namespace

int ResolveOmpThreadsPerWorker(int requested, int workers) {
  if (requested > 0) return requested;
  // libgomp parsed OMP_NUM_THREADS at start-up into the initial thread's setting, which
  // every new thread inherits; an unparsable value leaves its default.
  if (OmpNumThreadsSet()) return std::max(1, omp_get_max_threads());
  // One CPU stays with the thread that pushes, as for the worker count (threaded_engine.cc).
  return std::max(1, (AvailableCpus() - 1) / std::max(1, workers));
}

int ResolveCpuThreadsPerFunction(int requested, int workers) {
  if (requested > 0 || OmpNumThreadsSet()) return ResolveOmpThreadsPerWorker(requested, workers);
  return std::max(1, AvailableCpus() / std::max(1, workers));
}

namespace {

int ThreadsFor(double work, double work_per_thread, int cpu_threads) {
  const double useful = std::max(1.0, work / work_per_thread);
  return std::max(1, std::min(cpu_threads, static_cast<int>(std::min(useful, 1e6))));
}

}  // namespace

int ThreadsForWork(double flops, int cpu_threads) {
  return ThreadsFor(flops, kFlopsPerThread, cpu_threads);
}

int ThreadsForBytes(double bytes, int cpu_threads) {
  return ThreadsFor(bytes, kBytesPerThread, cpu_threads);
}

void SetOmpThreadsOfThisThread(int threads) { omp_set_num_threads(std::max(1, threads)); }

ScopedOmpThreads::ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
  if (threads != saved_) omp_set_num_threads(std::max(1, threads));
}

ScopedOmpThreads::~ScopedOmpThreads() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

}  // namespace tessera::engine

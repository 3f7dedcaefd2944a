#include "engine/internal/omp_threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include "core/cpu_count.h"

namespace tessera::engine::internal {

int ResolveOmpThreadsPerWorker(int requested, int workers) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && *env != '\0') {
    // libgomp parsed it at start-up into the initial thread's setting, which every new
    // thread inherits; an unparsable value leaves its default.
    return std::max(1, omp_get_max_threads());
  }
  // One CPU stays with the thread that pushes, as for the worker count (threaded_engine.cc).
  return std::max(1, (AvailableCpus() - 1) / std::max(1, workers));
}

void SetOmpThreadsOfThisThread(int threads) { omp_set_num_threads(std::max(1, threads)); }

ScopedOmpThreads::ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
  if (threads != saved_) omp_set_num_threads(threads);
}

ScopedOmpThreads::~ScopedOmpThreads() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

}  // namespace tessera::engine::internal

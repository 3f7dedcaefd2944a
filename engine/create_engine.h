// EngineOptions and CreateEngine: the one place an engine implementation is chosen.
//
// Environment variables read by EngineOptions::FromEnv (all optional):
//   TESSERA_ENGINE                 naive | threaded (default threaded)
//   TESSERA_CPU_WORKER_NTHREADS    CPU worker threads (default: the CPUs the process may use
//                                  (core/cpu_count.h) - 1, at least 1)
//   TESSERA_CPU_PRIORITY_NTHREADS  threads of the high-priority CPU queue (default 1)
//   TESSERA_GPU_WORKER_NTHREADS    compute workers (each with its own stream) per GPU (default 1)
//   TESSERA_GPU_COPY_NTHREADS      copy workers (each with its own stream) per GPU (default 1)
//   TESSERA_ENGINE_SPIN_US         how long an idle worker spins before sleeping (default 50)
//   TESSERA_OMP_THREADS_PER_WORKER OpenMP threads of each CPU compute worker (default:
//                                  OMP_NUM_THREADS when set, else the CPUs the process may
//                                  use but one, shared among the workers; priority and GPU
//                                  workers 1)
//   TESSERA_PROFILER               path of a Chrome trace to record every function into
//                                  ("%p" in it: the process id)
#ifndef TESSERA_ENGINE_CREATE_ENGINE_H_
#define TESSERA_ENGINE_CREATE_ENGINE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace tessera::engine {

struct EngineOptions {
  enum class Kind { kNaive, kThreaded };
  Kind kind = Kind::kThreaded;
  int cpu_workers = 0;  // 0: CPUs - 1 (one stays with the pushing thread), at least 1
  int cpu_priority_workers = 1;
  int gpu_workers_per_device = 1;
  int gpu_copy_workers_per_device = 1;
  int spin_us = 50;
  int omp_threads_per_worker = 0;  // 0: see TESSERA_OMP_THREADS_PER_WORKER above
  // Non-empty: profile every function from the start and write the trace here at exit.
  std::string profile_path;

  // Reads the variables above; an unparsable value is an error naming the variable.
  static absl::StatusOr<EngineOptions> FromEnv();
};

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const EngineOptions& options);

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_CREATE_ENGINE_H_

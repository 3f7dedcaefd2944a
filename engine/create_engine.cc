#include "engine/create_engine.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"
#include "engine/internal/naive_engine.h"
#include "engine/internal/threaded_engine.h"

namespace tessera::engine {
namespace {

// Reads an integer variable in [min, max]; leaves `out` alone when unset.
absl::Status ReadIntEnv(const char* name, int min, int max, int* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return absl::OkStatus();
  int value;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", text,
                                                   "': expected an integer in [", min, ", ",
                                                   max, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EngineOptions> EngineOptions::FromEnv() {
  EngineOptions o;
  if (const char* kind = std::getenv("TESSERA_ENGINE"); kind != nullptr && *kind != '\0') {
    std::string k = absl::AsciiStrToLower(kind);
    if (k == "naive" || k == "naiveengine") {
      o.kind = Kind::kNaive;
    } else if (k == "threaded" || k == "threadedengine" || k == "threadedenginepooled") {
      o.kind = Kind::kThreaded;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment variable TESSERA_ENGINE='", kind, "': expected 'naive' or 'threaded'"));
    }
  }
  RETURN_IF_ERROR(ReadIntEnv("TESSERA_CPU_WORKER_NTHREADS", 1, 1024, &o.cpu_workers));
  RETURN_IF_ERROR(ReadIntEnv("TESSERA_CPU_PRIORITY_NTHREADS", 1, 1024, &o.cpu_priority_workers));
  RETURN_IF_ERROR(ReadIntEnv("TESSERA_GPU_WORKER_NTHREADS", 1, 64, &o.gpu_workers_per_device));
  RETURN_IF_ERROR(ReadIntEnv("TESSERA_GPU_COPY_NTHREADS", 1, 64, &o.gpu_copy_workers_per_device));
  RETURN_IF_ERROR(ReadIntEnv("TESSERA_ENGINE_SPIN_US", 0, 1000000, &o.spin_us));
  RETURN_IF_ERROR(ReadIntEnv("TESSERA_OMP_THREADS_PER_WORKER", 1, 1024, &o.omp_threads_per_worker));
  if (const char* path = std::getenv("TESSERA_PROFILER"); path != nullptr) {
    // "%p" becomes the process id, so the daemons of one local cluster, which share the
    // variable, write a trace each.
    o.profile_path = absl::StrReplaceAll(path, {{"%p", absl::StrCat(getpid())}});
  }
  return o;
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const EngineOptions& options) {
  if (options.cpu_workers < 0 || options.spin_us < 0) {
    return absl::InvalidArgumentError("EngineOptions: negative worker count or spin time");
  }
  switch (options.kind) {
    case EngineOptions::Kind::kNaive:
      return std::unique_ptr<Engine>(new internal::NaiveEngine(options));
    case EngineOptions::Kind::kThreaded:
      return std::unique_ptr<Engine>(new internal::ThreadedEngine(options));
  }
  return absl::InvalidArgumentError("EngineOptions: unknown engine kind");
}

}  // namespace tessera::engine

// Profiler: records one event per engine function (name, device, thread, start, duration)
// and writes them as a Chrome trace (load the file in chrome://tracing or Perfetto).
//
// Off by default. Start(kAll) records every function; Start(kMarked) only those pushed
// with `profiling = true`. TESSERA_PROFILER=path starts it in kAll mode when the engine is
// created and writes the trace when the engine is destroyed.
//
// Thread-safe. Recording takes a mutex; it is meant for diagnosis, not for always-on use.
#ifndef TESSERA_ENGINE_PROFILER_H_
#define TESSERA_ENGINE_PROFILER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/context.h"
#include "core/mutex.h"
#include "engine/engine.h"

namespace tessera::engine {

struct ProfileEvent {
  const char* name = nullptr;  // outlives the engine (see Engine::NewOperator)
  Context ctx;
  FnProperty prop = FnProperty::kNormal;
  uint64_t thread_id = 0;  // small per-process number of the running thread
  int64_t start_ns = 0;    // steady clock
  int64_t end_ns = 0;
};

class Profiler {
 public:
  enum class Mode : int { kOff = 0, kMarked = 1, kAll = 2 };

  // Clears earlier events and starts recording.
  void Start(Mode mode = Mode::kAll) ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() { mode_.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed); }

  // Whether a function pushed with this `profiling` flag is recorded now.
  bool ShouldRecord(bool profiling) const {
    int mode = mode_.load(std::memory_order_relaxed);
    return mode == static_cast<int>(Mode::kAll) ||
           (profiling && mode == static_cast<int>(Mode::kMarked));
  }

  void Record(const ProfileEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<ProfileEvent> events() const ABSL_LOCKS_EXCLUDED(mu_);

  // {"traceEvents": [...]} with one complete ("X") event per function, microseconds.
  std::string ChromeTraceJson() const;
  absl::Status WriteChromeTrace(const std::string& path) const;

  static int64_t NowNs();
  // A small stable number for the calling thread.
  static uint64_t ThisThreadId();

 private:
  std::atomic<int> mode_{static_cast<int>(Mode::kOff)};
  mutable Mutex mu_;
  std::vector<ProfileEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_PROFILER_H_

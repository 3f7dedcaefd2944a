// GPU streams and events for the threaded engine.
//
// A GPU function finishes, as far as the engine is concerned, when it has enqueued its
// work: the engine records a CUDA event on the worker's stream and stores it on the
// variables the function touched. A later function on another stream makes its stream
// wait for that event (cudaStreamWaitEvent, no host blocking); a later CPU function, or
// WaitForVar, synchronizes on it. Functions on the same stream need nothing: the stream
// already orders them. This replaces MXNet 1.x's blocking stream synchronize per function.
//
// Without CUDA compiled in, or without a device, NumGpus() is 0 and nothing else here is
// called. Thread-safe.
#ifndef TESSERA_ENGINE_INTERNAL_GPU_SYNC_H_
#define TESSERA_ENGINE_INTERNAL_GPU_SYNC_H_

#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::engine::internal {

// Usable CUDA devices: 0 when built without CUDA or when the runtime finds none.
int NumGpus();

// One recorded event; returns itself to a pool when the last reference goes.
struct GpuEvent {
  void* event = nullptr;   // cudaEvent_t
  void* stream = nullptr;  // where it was recorded
  int device = 0;
};
using GpuEventRef = std::shared_ptr<GpuEvent>;

// What GPU work a variable still depends on. Guarded by the variable's lock.
struct GpuVarState {
  GpuEventRef write;                           // the last GPU function that mutated it
  absl::InlinedVector<GpuEventRef, 2> reads;   // GPU readers since then, one per stream
};

// Creates a non-blocking stream on `device` (and makes `device` current on this thread).
absl::StatusOr<void*> CreateStream(int device);
void DestroyStream(void* stream);

absl::StatusOr<GpuEventRef> RecordEvent(void* stream, int device);
// Makes `stream` wait for `event` without blocking the host.
absl::Status StreamWaitEvent(void* stream, const GpuEvent& event);
// Blocks the calling thread until `event` has completed.
absl::Status SyncEvent(const GpuEvent& event);

}  // namespace tessera::engine::internal

#endif  // TESSERA_ENGINE_INTERNAL_GPU_SYNC_H_

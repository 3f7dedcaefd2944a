#include "engine/internal/gpu_sync.h"

#if TESSERA_USE_CUDA
#include <cuda_runtime_api.h>

#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/cuda_status.h"
#include "core/mutex.h"
#endif

namespace tessera::engine::internal {

#if TESSERA_USE_CUDA

int NumGpus() {
  static const int count = [] {
    int n = 0;
    // No driver or no device is an error here; both mean "CPU only".
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error
      return 0;
    }
    return n;
  }();
  return count;
}

absl::StatusOr<void*> CreateStream(int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t stream;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return static_cast<void*>(stream);
}

void DestroyStream(void* stream) {
  if (stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

namespace {

// Events are reused: creating one costs a driver call, recording one is cheap.
class EventPool {
 public:
  absl::StatusOr<cudaEvent_t> Take(int device) {
    {
      MutexLock guard(&mu_);
      if (device < static_cast<int>(free_.size()) && !free_[device].empty()) {
        cudaEvent_t e = free_[device].back();
        free_[device].pop_back();
        return e;
      }
    }
    // An event belongs to the device current at its creation and can only be recorded on
    // that device's streams: create it on `device`, whatever the calling thread's device.
    int current = 0;
    CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    if (current != device) CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    cudaEvent_t e;
    const cudaError_t created = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (current != device) CUDA_RETURN_IF_ERROR(cudaSetDevice(current));
    CUDA_RETURN_IF_ERROR(created);
    return e;
  }
  void Give(int device, cudaEvent_t e) {
    MutexLock guard(&mu_);
    if (device >= static_cast<int>(free_.size())) free_.resize(device + 1);
    free_[device].push_back(e);
  }

 private:
  Mutex mu_;
  std::vector<std::vector<cudaEvent_t>> free_ ABSL_GUARDED_BY(mu_);
};

EventPool& Events() {
  static EventPool* pool = new EventPool;  // lives until exit: events may outlive engines
  return *pool;
}

}  // namespace

absl::StatusOr<GpuEventRef> RecordEvent(void* stream, int device) {
  absl::StatusOr<cudaEvent_t> e = Events().Take(device);
  if (!e.ok()) return e.status();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(*e, static_cast<cudaStream_t>(stream)));
  auto* raw = new GpuEvent{*e, stream, device};
  return GpuEventRef(raw, [](GpuEvent* ev) {
    Events().Give(ev->device, static_cast<cudaEvent_t>(ev->event));
    delete ev;
  });
}

absl::Status StreamWaitEvent(void* stream, const GpuEvent& event) {
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                           static_cast<cudaEvent_t>(event.event), 0));
  return absl::OkStatus();
}

absl::Status SyncEvent(const GpuEvent& event) {
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(event.event)));
  return absl::OkStatus();
}

#else  // !TESSERA_USE_CUDA

int NumGpus() { return 0; }

absl::StatusOr<void*> CreateStream(int) {
  return absl::FailedPreconditionError("Tessera was built without CUDA");
}
void DestroyStream(void*) {}
absl::StatusOr<GpuEventRef> RecordEvent(void*, int) {
  return absl::FailedPreconditionError("Tessera was built without CUDA");
}
absl::Status StreamWaitEvent(void*, const GpuEvent&) {
  return absl::FailedPreconditionError("Tessera was built without CUDA");
}
absl::Status SyncEvent(const GpuEvent&) {
  return absl::FailedPreconditionError("Tessera was built without CUDA");
}

#endif  // TESSERA_USE_CUDA

}  // namespace tessera::engine::internal

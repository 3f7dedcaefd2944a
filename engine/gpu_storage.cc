// The CUDA allocators under Storage's pools: cudaMalloc for kGPU, cudaHostAlloc for
// kCPUPinned. Compiled to nothing without CUDA (TESSERA_USE_CUDA comes from
// //third_party:cuda under --config=cuda); storage.cc declares what it uses from here.
//
// A machine may have the toolkit but no GPU (the development machines do): the CUDA
// runtime then fails cudaGetDeviceCount (no driver) or reports 0 devices. Both mean "no
// GPU", which GPU allocations report as FAILED_PRECONDITION; nothing here aborts.
#if TESSERA_USE_CUDA

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/context.h"
#include "engine/storage.h"
#include "spdlog/spdlog.h"

namespace tessera::engine::storage_internal {
namespace {

std::string CudaErrorText(const char* call, cudaError_t err) {
  return absl::StrCat(call, " failed: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
}

// Makes `device` current for one call and restores the caller's device afterwards, so
// allocating never changes which GPU the calling (engine worker) thread computes on.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    status_ = cudaGetDevice(&previous_);
    if (status_ == cudaSuccess && previous_ != device) status_ = cudaSetDevice(device);
    if (status_ != cudaSuccess) cudaGetLastError();  // clear it for later calls
    switched_ = status_ == cudaSuccess && previous_ != device;
  }
  ~ScopedDevice() {
    if (switched_) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  cudaError_t status_;
};

class GpuAllocator final : public DeviceAllocator {
 public:
  explicit GpuAllocator(int device) : device_(device) {}

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    ScopedDevice scoped(device_);
    if (scoped.status() != cudaSuccess) {
      return absl::InternalError(CudaErrorText("cudaSetDevice", scoped.status()));
    }
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // an out-of-memory error is not sticky; clear it
      std::string text = CudaErrorText("cudaMalloc", err);
      return err == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(text)
                                              : absl::InternalError(text);
    }
    return ptr;
  }

  void Deallocate(void* ptr, size_t bytes) override {
    ScopedDevice scoped(device_);
    const cudaError_t err = cudaFree(ptr);
    // At process exit the runtime may already be unloaded; the memory goes with it.
    if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
      cudaGetLastError();
      spdlog::warn("Storage: {} of {} bytes on gpu({})", CudaErrorText("cudaFree", err), bytes,
                   device_);
    }
  }

 private:
  const int device_;
};

class CudaHostAllocator final : public DeviceAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* ptr = nullptr;
    // Portable: the pinned block serves copies to and from every GPU, not just the current.
    const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      std::string text = CudaErrorText("cudaHostAlloc", err);
      return err == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(text)
                                              : absl::InternalError(text);
    }
    return ptr;
  }

  void Deallocate(void* ptr, size_t bytes) override {
    const cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
      cudaGetLastError();
      spdlog::warn("Storage: {} of {} pinned bytes", CudaErrorText("cudaFreeHost", err), bytes);
    }
  }
};

absl::StatusOr<int> ProbeDeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(CudaErrorText("cudaGetDeviceCount", err));
  }
  return count;
}

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  // Devices do not come and go while a process runs; ask the driver once.
  static const absl::StatusOr<int> count = ProbeDeviceCount();
  return count;
}

absl::StatusOr<std::unique_ptr<DeviceAllocator>> NewGpuAllocator(int device) {
  const std::string name = Context::GPU(device).ToString();
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device for ", name, ": ", count.status().message()));
  }
  if (*count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device for ", name, ": the CUDA runtime reports 0 devices"));
  }
  if (device >= *count) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device for ", name,
                                                      ": this machine has ", *count,
                                                      " (gpu(0)..gpu(", *count - 1, "))"));
  }
  return std::make_unique<GpuAllocator>(device);
}

std::unique_ptr<DeviceAllocator> NewCudaHostAllocator() {
  return std::make_unique<CudaHostAllocator>();
}

absl::Status FreeWhenStreamReaches(void* stream, std::function<void()> release) {
  auto* payload = new std::function<void()>(std::move(release));
  const cudaError_t err = cudaLaunchHostFunc(
      static_cast<cudaStream_t>(stream),
      [](void* p) {
        auto* fn = static_cast<std::function<void()>*>(p);
        (*fn)();
        delete fn;
      },
      payload);
  if (err != cudaSuccess) {
    delete payload;
    cudaGetLastError();
    return absl::InternalError(CudaErrorText("cudaLaunchHostFunc", err));
  }
  return absl::OkStatus();
}

}  // namespace tessera::engine::storage_internal

#endif  // TESSERA_USE_CUDA

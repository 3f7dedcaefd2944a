// Storage: the CPU and pinned pools, the pool logic shared by every device, and the
// factory. The CUDA allocators live in gpu_storage.cc.
//
// Locks are tessera::Mutex (a std::mutex, annotated for clang's thread-safety analysis), not
// absl::Mutex (unlike STYLE.md's habit 7): Debian's Abseil is not built with ThreadSanitizer,
// so TSan cannot see absl::Mutex's synchronization and would report false races on
// everything it guards. The Storage tests run under --config=tsan.
#include "engine/storage.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "spdlog/spdlog.h"

namespace tessera::engine {

#if TESSERA_USE_CUDA
namespace storage_internal {
// Defined in gpu_storage.cc, which compiles to nothing without CUDA. Declared here rather
// than in a header because this file is their only caller.
//
// Usable CUDA devices; an error (naming the CUDA call) when the runtime cannot tell.
absl::StatusOr<int> CudaDeviceCount();
// cudaMalloc on `device`; FAILED_PRECONDITION when there is no such device.
absl::StatusOr<std::unique_ptr<DeviceAllocator>> NewGpuAllocator(int device);
// cudaHostAlloc (portable pinned memory); call only when a device exists.
std::unique_ptr<DeviceAllocator> NewCudaHostAllocator();
// Runs `release` on a CUDA runtime thread once `stream` reaches this point
// (cudaLaunchHostFunc). `release` must not call CUDA.
absl::Status FreeWhenStreamReaches(void* stream, std::function<void()> release);
}  // namespace storage_internal
#endif

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// kCPU memory, and kCPUPinned memory where there is no GPU to pin it for.
class HostAllocator final : public DeviceAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    // Size classes are multiples of the alignment, as aligned_alloc requires.
    void* ptr = std::aligned_alloc(kStorageAlignment, bytes);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("aligned_alloc(", kStorageAlignment, ", ", bytes, ") failed"));
    }
    return ptr;
  }
  void Deallocate(void* ptr, size_t /*bytes*/) override { std::free(ptr); }
};

// One device's pool: free lists per size class plus the table of live blocks, which is
// what lets Free() recognize double and foreign frees.
class DevicePool {
 public:
  DevicePool(Context ctx, std::unique_ptr<DeviceAllocator> allocator, size_t limit_bytes)
      : ctx_(ctx), limit_bytes_(limit_bytes), allocator_(std::move(allocator)) {}

  ~DevicePool() {
    MutexLock lock(&mu_);
    if (!live_.empty()) {
      spdlog::warn("Storage destroyed with {} blocks ({} bytes) still in use on {}; freeing them",
                   live_.size(), stats_.bytes_in_use, ctx_.ToString());
    }
    for (const auto& [ptr, size] : live_) allocator_->Deallocate(ptr, size);
    live_.clear();
    ReleasePoolLocked();
  }

  // `bytes` > 0.
  absl::StatusOr<void*> Alloc(size_t bytes) {
    const size_t size = StorageSizeClass(bytes);
    MutexLock lock(&mu_);
    void* ptr = nullptr;
    size_t block = size;
    // The smallest pooled block this request may take (free_ holds no empty lists).
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= StorageReuseLimit(size)) {
      block = it->first;
      ptr = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_.erase(it);
      stats_.bytes_pooled -= block;
      ++stats_.pool_hits;
    } else {
      absl::StatusOr<void*> fresh = AllocateFromSystemLocked(size);
      if (!fresh.ok()) {
        // The pool may hold enough memory in other classes: give it back and retry once.
        const size_t pooled_before = stats_.bytes_pooled;
        ReleasePoolLocked();
        fresh = AllocateFromSystemLocked(size);
        if (!fresh.ok()) return OutOfMemory(bytes, size, pooled_before, fresh.status());
      }
      ptr = *fresh;
    }
    live_.emplace(ptr, block);
    stats_.bytes_in_use += block;
    ++stats_.allocations;
    return ptr;
  }

  // Back to the pool, or to the system when `to_system`.
  void Free(void* ptr, bool to_system) {
    MutexLock lock(&mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      ++stats_.invalid_frees;
      spdlog::error(
          "Storage::{}: block {} is not in use on {} (freed twice, or never allocated "
          "there); ignored",
          to_system ? "DirectFree" : "Free", fmt::ptr(ptr), ctx_.ToString());
      return;
    }
    const size_t size = it->second;
    live_.erase(it);
    stats_.bytes_in_use -= size;
    if (to_system) {
      allocator_->Deallocate(ptr, size);
    } else {
      free_[size].push_back(ptr);
      stats_.bytes_pooled += size;
    }
  }

  void ReleaseAll() {
    MutexLock lock(&mu_);
    ReleasePoolLocked();
  }

  StorageStats Stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  absl::StatusOr<void*> AllocateFromSystemLocked(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (limit_bytes_ != 0 && stats_.bytes_in_use + stats_.bytes_pooled + size > limit_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the device limit of ", limit_bytes_, " bytes would be exceeded"));
    }
    return allocator_->Allocate(size);
  }

  void ReleasePoolLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [size, blocks] : free_) {
      for (void* ptr : blocks) allocator_->Deallocate(ptr, size);
    }
    free_.clear();
    stats_.bytes_pooled = 0;
  }

  absl::Status OutOfMemory(size_t bytes, size_t size, size_t pooled_before,
                           const absl::Status& cause) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string message =
        absl::StrCat("out of memory allocating ", bytes, " bytes on ", ctx_.ToString(),
                     " (size class ", size, " bytes; in use ", stats_.bytes_in_use,
                     " bytes, pooled ", pooled_before, " bytes released before retrying");
    if (limit_bytes_ != 0) absl::StrAppend(&message, ", limit ", limit_bytes_, " bytes");
    absl::StrAppend(&message, "): ", cause.message());
    // Only a real shortage is RESOURCE_EXHAUSTED; e.g. a sticky CUDA error keeps its code.
    return absl::Status(
        absl::IsResourceExhausted(cause) ? absl::StatusCode::kResourceExhausted : cause.code(),
        message);
  }

  const Context ctx_;
  const size_t limit_bytes_;  // 0: unlimited
  mutable Mutex mu_;
  std::unique_ptr<DeviceAllocator> allocator_ ABSL_GUARDED_BY(mu_);
  // Size class -> pooled blocks, ordered so Alloc finds the smallest block that fits.
  std::map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, size_t> live_ ABSL_GUARDED_BY(mu_);  // block -> size class
  StorageStats stats_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<DeviceAllocator>> NewSystemAllocator(Context ctx) {
  switch (ctx.type) {
    case DeviceType::kCPU:
      return std::make_unique<HostAllocator>();
    case DeviceType::kCPUPinned:
#if TESSERA_USE_CUDA
      // Pinning only pays off (and cudaHostAlloc only works) with a GPU to copy to.
      if (absl::StatusOr<int> count = storage_internal::CudaDeviceCount();
          count.ok() && *count > 0) {
        return storage_internal::NewCudaHostAllocator();
      }
#endif
      return std::make_unique<HostAllocator>();
    case DeviceType::kGPU:
#if TESSERA_USE_CUDA
      return storage_internal::NewGpuAllocator(ctx.id);
#else
      return absl::FailedPreconditionError(
          absl::StrCat("no CUDA device for ", ctx.ToString(),
                       ": Tessera was built without CUDA (build with --config=cuda)"));
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device type ", static_cast<int>(ctx.type), " in ", ctx.ToString()));
}

class PooledStorage final : public Storage {
 public:
  explicit PooledStorage(const StorageOptions& options) : options_(options) {}

  absl::StatusOr<StorageHandle> Alloc(size_t bytes, Context ctx) override {
    absl::StatusOr<DevicePool*> pool = GetOrCreatePool(ctx);
    if (!pool.ok()) return pool.status();
    if (bytes == 0) return StorageHandle{nullptr, 0, ctx};
    if (bytes > kStorageMaxBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory allocating ", bytes, " bytes on ", ctx.ToString(),
                       ": more than the largest supported block (", kStorageMaxBytes, " bytes)"));
    }
    absl::StatusOr<void*> ptr = (*pool)->Alloc(bytes);
    if (!ptr.ok()) return ptr.status();
    return StorageHandle{*ptr, bytes, ctx};
  }

  void Free(StorageHandle handle) override { Release(handle, /*to_system=*/false); }
  void DirectFree(StorageHandle handle) override { Release(handle, /*to_system=*/true); }

  absl::Status FreeAfterStream(StorageHandle handle, void* stream) override {
    if (stream == nullptr || !handle.ctx.is_gpu() || handle.dptr == nullptr) {
      Free(handle);
      return absl::OkStatus();
    }
#if TESSERA_USE_CUDA
    return storage_internal::FreeWhenStreamReaches(
        stream, [this, handle] { Release(handle, /*to_system=*/false); });
#else
    Free(handle);
    return absl::OkStatus();
#endif
  }

  void ReleaseAll(Context ctx) override {
    if (DevicePool* pool = FindPool(ctx)) pool->ReleaseAll();
  }

  StorageStats Stats(Context ctx) const override {
    const DevicePool* pool = FindPool(ctx);
    return pool == nullptr ? StorageStats{} : pool->Stats();
  }

  std::vector<Context> Devices() const override {
    MutexLock lock(&mu_);
    std::vector<Context> devices;
    for (const auto& [ctx, pool] : pools_) devices.push_back(ctx);
    return devices;
  }

 private:
  void Release(const StorageHandle& handle, bool to_system) {
    if (handle.dptr == nullptr) return;  // a size-0 handle owns nothing
    DevicePool* pool = FindPool(handle.ctx);
    if (pool == nullptr) {
      spdlog::error("Storage::{}: block {} names {}, where nothing was ever allocated; ignored",
                    to_system ? "DirectFree" : "Free", fmt::ptr(handle.dptr),
                    handle.ctx.ToString());
      return;
    }
    pool->Free(handle.dptr, to_system);
  }

  // Pools are created on first use and live as long as the Storage, so the raw pointers
  // handed out stay valid without holding mu_.
  DevicePool* FindPool(Context ctx) const {
    MutexLock lock(&mu_);
    auto it = pools_.find(ctx);
    return it == pools_.end() ? nullptr : it->second.get();
  }

  absl::StatusOr<DevicePool*> GetOrCreatePool(Context ctx) {
    if (ctx.id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device id of ", ctx.ToString(), " is negative"));
    }
    MutexLock lock(&mu_);
    auto it = pools_.find(ctx);
    if (it != pools_.end()) return it->second.get();
    // A failure is not cached: a GPU that is missing now yields the same error next time.
    absl::StatusOr<std::unique_ptr<DeviceAllocator>> allocator =
        options_.allocator_factory ? options_.allocator_factory(ctx) : NewSystemAllocator(ctx);
    if (!allocator.ok()) return allocator.status();
    const size_t limit = ctx.type == DeviceType::kCPU ? options_.cpu_limit_bytes : 0;
    auto pool = std::make_unique<DevicePool>(ctx, *std::move(allocator), limit);
    DevicePool* raw = pool.get();
    pools_.emplace(ctx, std::move(pool));
    return raw;
  }

  const StorageOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<Context, std::unique_ptr<DevicePool>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

size_t StorageSizeClass(size_t bytes) {
  if (bytes <= kStorageAlignment) return kStorageAlignment;
  if (bytes <= kMiB) return std::bit_ceil(bytes);
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

size_t StorageReuseLimit(size_t size) {
  if (size <= kMiB) return size;
  return size / 3 * 4 / kMiB * kMiB;
}

absl::StatusOr<StorageOptions> StorageOptions::FromEnv() {
  StorageOptions options;
  constexpr const char* kLimitVar = "TESSERA_CPU_MEMORY_LIMIT_BYTES";
  const char* value = std::getenv(kLimitVar);
  if (value != nullptr && *value != '\0') {
    uint64_t limit = 0;
    if (!absl::SimpleAtoi(value, &limit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kLimitVar, "='", value, "': expected a non-negative number of bytes (0 = no limit)"));
    }
    options.cpu_limit_bytes = static_cast<size_t>(limit);
  }
  return options;
}

std::unique_ptr<Storage> Storage::Create(const StorageOptions& options) {
  return std::make_unique<PooledStorage>(options);
}

}  // namespace tessera::engine

// Storage: the pooled memory allocator every NDArray, temp space and buffer in flight
// draws from, one pool per device (cpu(n), cpu_pinned(n), gpu(n)).
//
// Why a pool: cudaMalloc/cudaFree synchronize the device and cost milliseconds, and glibc
// hands large host buffers back to the kernel on free (page faults on every reuse). Free()
// therefore keeps a block in its device's pool, keyed by size class, and the next Alloc()
// of that class reuses it; DirectFree() and ReleaseAll() give memory back to the system.
//
// Size classes (StorageSizeClass): requests round up to a power of two, at least 64 bytes,
// up to 1 MiB; above 1 MiB to the next multiple of 1 MiB. Powers of two keep the number of
// small classes tiny (15) while wasting at most half a block; above 1 MiB, where a half
// would be megabytes, MiB steps bound the waste to under 1 MiB (and below 50%). A request
// takes a pooled block of its own class first; above 1 MiB, when its class has none, it
// takes the smallest pooled block of at most 4/3 of its class (StorageReuseLimit) before
// asking the system: networks whose activations differ by a few MiB (the last batch of an
// epoch, a bucket of another length) then reuse each other's blocks instead of calling
// cudaMalloc, and no request pins a block much larger than it. Every block is 64-byte
// aligned (a cache line, and enough for AVX-512 loads); GPU blocks are 256-byte aligned as
// cudaMalloc guarantees.
//
// Devices: kCPU memory comes from aligned_alloc. kCPUPinned comes from cudaHostAlloc when
// CUDA is compiled in and a GPU is present, else from aligned_alloc (so CPU-only machines
// run the same code). kGPU comes from cudaMalloc; without CUDA or without a device, Alloc
// on a GPU context returns FAILED_PRECONDITION naming the reason. When the system
// allocator fails (or a device would exceed its configured limit), the device's pool is
// released and the allocation retried once; a second failure is RESOURCE_EXHAUSTED with a
// message naming the requested size, the device and its usage.
//
// Handles: a StorageHandle is a plain value; `size` is the requested size (the block may be
// larger, StorageSizeClass(size)). Size 0 gives {nullptr, 0, ctx}, which Free ignores.
// Freeing a handle twice, or one this Storage never gave out, is detected (the storage
// keeps every live block in a table) and then logged as an error and ignored, counted in
// StorageStats::invalid_frees. We chose that over aborting: the table catches the bug
// before any memory is touched, so the pool stays consistent, and a training daemon should
// not die over it; tests assert on the counter.
//
// Ownership: Storage owns every block. Destroying it returns all memory, pooled or still
// in use, to the system; handles still held then dangle.
//
// Thread safety: every method may be called from any thread at once. Each device pool has
// its own mutex, so devices never contend with each other.
#ifndef TESSERA_ENGINE_STORAGE_H_
#define TESSERA_ENGINE_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context.h"

namespace tessera::engine {

// Alignment of every CPU and pinned block.
inline constexpr size_t kStorageAlignment = 64;
// Largest request Storage accepts; anything larger is RESOURCE_EXHAUSTED up front (it
// could never be satisfied, and rounding it up would overflow).
inline constexpr size_t kStorageMaxBytes = size_t{1} << 48;

// The block size a request of `bytes` (0 < bytes <= kStorageMaxBytes) is served with.
size_t StorageSizeClass(size_t bytes);
// The largest pooled block a request of size class `size` may take: `size` itself up to
// 1 MiB, 4/3 of it (rounded down to a MiB multiple) above.
size_t StorageReuseLimit(size_t size);

struct StorageHandle {
  void* dptr = nullptr;
  size_t size = 0;  // requested bytes; the block holds StorageSizeClass(size)
  Context ctx;
};

// Counters of one device pool. Byte counts are block (size-class) bytes.
struct StorageStats {
  size_t bytes_in_use = 0;     // handed out and not yet freed
  size_t bytes_pooled = 0;     // freed into the pool, held for reuse
  uint64_t allocations = 0;    // successful Alloc calls of non-zero size
  uint64_t pool_hits = 0;      // of those, served from the pool
  uint64_t invalid_frees = 0;  // Free/DirectFree of unknown or already freed handles
  double hit_rate() const {
    return allocations == 0 ? 0.0 : static_cast<double>(pool_hits) / allocations;
  }
};

// The system allocator under one device pool. Storage calls it with its pool mutex held,
// so implementations need no locking of their own. Exposed so tests can put a fake under
// the pool (e.g. one that fails on demand to exercise release-and-retry).
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // `bytes` is always a size class. Returns a block aligned to at least
  // kStorageAlignment, or an error (RESOURCE_EXHAUSTED when memory ran out).
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
};

struct StorageOptions {
  // Most bytes (in use + pooled) each kCPU device pool may hold from the system; 0 means
  // unlimited. Lets tests and memory-capped containers hit out-of-memory predictably.
  // kCPUPinned and kGPU pools are not limited by it.
  size_t cpu_limit_bytes = 0;

  // Builds the system allocator of a device pool when the pool is first used. Null means
  // the real one (aligned_alloc / cudaHostAlloc / cudaMalloc). An error fails that Alloc.
  std::function<absl::StatusOr<std::unique_ptr<DeviceAllocator>>(Context)> allocator_factory;

  // Reads TESSERA_CPU_MEMORY_LIMIT_BYTES (a non-negative integer; unset or empty means 0).
  // A bad value is INVALID_ARGUMENT naming the variable.
  static absl::StatusOr<StorageOptions> FromEnv();
};

class Storage {
 public:
  static std::unique_ptr<Storage> Create(const StorageOptions& options = {});

  virtual ~Storage() = default;

  // A block of at least `bytes` on `ctx`. Errors: INVALID_ARGUMENT for a negative device
  // id, FAILED_PRECONDITION for a GPU context without CUDA or without that device,
  // RESOURCE_EXHAUSTED when memory ran out even after releasing the device's pool.
  virtual absl::StatusOr<StorageHandle> Alloc(size_t bytes, Context ctx) = 0;
  // Returns the block to its device's pool.
  virtual void Free(StorageHandle handle) = 0;
  // Returns the block to the system at once.
  virtual void DirectFree(StorageHandle handle) = 0;
  // Returns a GPU block to its pool once `stream` (a cudaStream_t of its device) has reached
  // this point, without blocking anyone or synchronizing the device (a host function
  // enqueued on the stream; the block stays "in use" until then). For a block whose last
  // users are all ordered before that point on the stream, e.g. a scratch buffer grown by the
  // function that now holds it. A null stream or a host block is Free() at once. The Storage
  // must outlive the stream's pending work (runtimes wait for all work before tearing down).
  virtual absl::Status FreeAfterStream(StorageHandle handle, void* stream) = 0;
  // Returns every pooled block of `ctx` to the system; blocks in use are untouched.
  virtual void ReleaseAll(Context ctx) = 0;
  // Zeros for a device never used.
  virtual StorageStats Stats(Context ctx) const = 0;
  // The devices something was allocated on so far.
  virtual std::vector<Context> Devices() const = 0;
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_STORAGE_H_

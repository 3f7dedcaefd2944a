// ResourceManager: the per-device resources operators ask for instead of making their own,
// as in MXNet: a random generator (kRandom) and a growable scratch buffer (kTempSpace).
//
// The guard. Every resource comes with an engine variable, `Resource::var`. A function
// that uses a resource lists that variable in its mutate_vars, so the engine never runs two
// functions that use the same generator or scratch buffer at once, and runs them in push
// order. That is the whole synchronization: a Resource itself has no lock, and using one
// without declaring its variable is a data race.
//
// Random generators: one per device, created on first request. Device d's generator is
// PhiloxRandom(seed, RandomSubsequence(d)), so one seed reproduces every device's stream and
// no two devices share one. SeedRandom() reseeds them all through the engine. A GPU's
// generator lives in host memory like the others; a kernel takes a copy by value and the
// function advances the original (PhiloxRandom::Skip) by what the kernel consumed.
//
// Temp space: `temp_space_copies` buffers per device, handed out round-robin so that up to
// that many operators on one device can use scratch space concurrently. Each starts empty
// and grows through Storage on the first get_space() that needs more. An executor takes a
// private buffer instead (RequestPrivateTempSpace): functions queue on a resource's variable
// in push order, so a shared buffer lets one executor's function that waits on another
// process (a dist_sync pull) hold back every other executor's functions behind it - two
// dist_sync workers in one process deadlocked that way.
//
// Ownership: the manager owns every resource; a Resource is a cheap handle, valid while its
// manager lives. The Engine and Storage passed in are not owned and must outlive it.
//
// Thread safety: Request and SeedRandom may be called from any thread. Resource's getters
// may only be called from inside an engine function that mutates `var`.
#ifndef TESSERA_ENGINE_RESOURCE_H_
#define TESSERA_ENGINE_RESOURCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context.h"
#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/philox.h"
#include "engine/storage.h"

namespace tessera::engine {

struct ResourceRequest {
  enum Type {
    kRandom,     // a PhiloxRandom generator
    kTempSpace,  // scratch memory of any size, valid until the function returns
  };
  Type type = kTempSpace;
};

// The Philox subsequence of `ctx`'s generator: device type in the high 32 bits, device id
// in the low 32, so every device (cpu(0), cpu_pinned(0), gpu(0), gpu(1), ...) differs.
uint64_t RandomSubsequence(Context ctx);

namespace resource_internal {
struct ResourceState;  // defined in resource.cc
}

// A handle to one resource, handed to operators. Plain fields, as in MXNet, because
// operators read `var` and `ctx` all the time; the state behind it is private.
struct Resource {
  ResourceRequest::Type type = ResourceRequest::kTempSpace;
  VarHandle var;    // list it in the mutate_vars of every function that uses this resource
  int32_t id = -1;  // unique within its ResourceManager
  Context ctx;      // the device it serves

  // The device's generator. Only for kRandom; calling it on anything else is a programmer
  // bug and aborts.
  PhiloxRandom* get_random() const;

  // A buffer of at least `bytes` on `ctx` (a device pointer for GPU contexts), 64-byte
  // aligned, valid until the calling function returns; its contents are not preserved
  // across calls. Grows the buffer when needed; out of memory is RESOURCE_EXHAUSTED.
  // FAILED_PRECONDITION on a resource that is not kTempSpace. On a GPU, pass the calling
  // function's stream: the outgrown buffer then returns to the pool when that stream reaches
  // this point (Storage::FreeAfterStream) instead of through cudaFree, which would
  // synchronize the whole device.
  absl::StatusOr<void*> get_space(size_t bytes, void* stream = nullptr) const;

 private:
  friend class ResourceManager;
  resource_internal::ResourceState* state_ = nullptr;  // owned by the ResourceManager
};

class ResourceManager {
 public:
  // `engine` and `storage` are not owned and must outlive the manager. `seed` seeds every
  // generator. `temp_space_copies` >= 1 is the number of temp-space buffers per device; 0
  // means TempSpaceCopiesFromEnv(), or 1 (with an error logged) when that fails.
  ResourceManager(Engine* engine, Storage* storage, uint64_t seed = 0, int temp_space_copies = 0);
  // Waits for every function using a resource, then frees the buffers and deletes the
  // variables. Call it outside engine functions.
  ~ResourceManager();

  ResourceManager(const ResourceManager&) = delete;
  ResourceManager& operator=(const ResourceManager&) = delete;

  // The resource of type `request.type` for `ctx`, created on first request. kRandom
  // always returns the device's one generator; kTempSpace cycles through its copies.
  // Errors: whatever Storage says about `ctx` (e.g. FAILED_PRECONDITION for a GPU that is
  // not there), INVALID_ARGUMENT for an unknown type.
  absl::StatusOr<Resource> Request(Context ctx, const ResourceRequest& request);

  // Reseeds every device's generator to PhiloxRandom(seed, RandomSubsequence(device)), by
  // pushing a function that mutates the generator's variable: functions pushed before
  // still draw from the old stream, functions pushed after from the new one. Generators
  // created later use `seed` too. Returns at once; errors are push-time misuse only.
  absl::Status SeedRandom(uint64_t seed);

  // A kTempSpace resource of the caller's own (see the top of this file), until
  // ReleasePrivateTempSpace: its buffer is freed once every function using it has run.
  // Errors as Request.
  absl::StatusOr<Resource> RequestPrivateTempSpace(Context ctx);
  // `resource` must come from RequestPrivateTempSpace of this manager and not be used for
  // new functions afterwards.
  void ReleasePrivateTempSpace(const Resource& resource);

  int temp_space_copies() const { return temp_space_copies_; }

  // Reads TESSERA_TEMP_SPACE_COPIES: unset or empty is 1; anything but an integer >= 1 is
  // INVALID_ARGUMENT naming the variable.
  static absl::StatusOr<int> TempSpaceCopiesFromEnv();

 private:
  // The resources of one device. Raw pointers into states_.
  struct DeviceResources {
    resource_internal::ResourceState* random = nullptr;
    std::vector<resource_internal::ResourceState*> temp_spaces;
    size_t next_temp_space = 0;
  };

  resource_internal::ResourceState* NewState(ResourceRequest::Type type, Context ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `ctx`'s entry, created (after Storage accepted the device) on first use.
  absl::StatusOr<DeviceResources*> Device(Context ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static Resource HandleOf(resource_internal::ResourceState* state);

  Engine* const engine_;    // not owned
  Storage* const storage_;  // not owned
  const int temp_space_copies_;

  // tessera::Mutex (a std::mutex) rather than absl::Mutex: Debian's Abseil is not built with
  // ThreadSanitizer, which then cannot see absl::Mutex's synchronization (these tests run
  // under TSan).
  Mutex mu_;
  uint64_t seed_ ABSL_GUARDED_BY(mu_);
  int32_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<Context, DeviceResources> devices_ ABSL_GUARDED_BY(mu_);
  // Every resource, in creation order. The states themselves are guarded by their engine
  // variables, not by mu_.
  std::vector<std::unique_ptr<resource_internal::ResourceState>> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::engine

#endif  // TESSERA_ENGINE_RESOURCE_H_

#include "engine/resource.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::engine {
namespace resource_internal {

// One resource. Created under the manager's mutex; afterwards touched only by functions
// that mutate `var` (and by the manager's destructor once the variable is idle).
struct ResourceState {
  ResourceRequest::Type type;
  Context ctx;
  VarHandle var;
  int32_t id;
  PhiloxRandom random;  // kRandom
  Storage* storage;     // kTempSpace: where the buffer comes from; not owned
  StorageHandle space;  // kTempSpace: the current buffer, empty until first use
};

}  // namespace resource_internal

using resource_internal::ResourceState;

uint64_t RandomSubsequence(Context ctx) {
  return (static_cast<uint64_t>(static_cast<uint8_t>(ctx.type)) << 32) |
         static_cast<uint32_t>(ctx.id);
}

PhiloxRandom* Resource::get_random() const {
  TESSERA_CHECK(state_ != nullptr && type == ResourceRequest::kRandom);
  return &state_->random;
}

absl::StatusOr<void*> Resource::get_space(size_t bytes, void* stream) const {
  if (state_ == nullptr) {
    return absl::FailedPreconditionError(
        "get_space on a Resource that no ResourceManager handed out");
  }
  if (type != ResourceRequest::kTempSpace) {
    return absl::FailedPreconditionError(absl::StrCat("get_space on resource ", id, " of ",
                                                      ctx.ToString(), ", which is not temp space"));
  }
  StorageHandle& space = state_->space;
  if (bytes == 0) return space.dptr;
  if (space.dptr != nullptr && StorageSizeClass(space.size) >= bytes) return space.dptr;
  // Grow. Not a plain Free on a GPU: kernels queued earlier on other streams may still use
  // the old block, and a pooled block could be handed to another stream at once. Every
  // earlier user is ordered before the caller's stream (they all mutated this resource's
  // variable), so the block goes back to the pool when that stream gets here; without a
  // stream, cudaFree, which waits for the whole device (MXNet's temp space's choice).
  // Freeing before allocating keeps the peak at one buffer on the host.
  if (ctx.is_gpu() && stream != nullptr) {
    if (absl::Status s = state_->storage->FreeAfterStream(space, stream); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("temp space resource ", id, ": ", s.message()));
    }
  } else {
    state_->storage->DirectFree(space);
  }
  space = StorageHandle{};
  absl::StatusOr<StorageHandle> grown = state_->storage->Alloc(bytes, ctx);
  if (!grown.ok()) {
    return absl::Status(grown.status().code(),
                        absl::StrCat("temp space resource ", id, ": ", grown.status().message()));
  }
  space = *grown;
  return space.dptr;
}

absl::StatusOr<int> ResourceManager::TempSpaceCopiesFromEnv() {
  constexpr const char* kVar = "TESSERA_TEMP_SPACE_COPIES";
  const char* value = std::getenv(kVar);
  if (value == nullptr || *value == '\0') return 1;
  int copies = 0;
  if (!absl::SimpleAtoi(value, &copies) || copies < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kVar, "='", value, "': expected an integer >= 1 (buffers per device)"));
  }
  return copies;
}

namespace {

int ResolveTempSpaceCopies(int requested) {
  TESSERA_CHECK(requested >= 0);
  if (requested > 0) return requested;
  absl::StatusOr<int> from_env = ResourceManager::TempSpaceCopiesFromEnv();
  if (from_env.ok()) return *from_env;
  spdlog::error("ResourceManager: {}; using 1", std::string(from_env.status().message()));
  return 1;
}

}  // namespace

ResourceManager::ResourceManager(Engine* engine, Storage* storage, uint64_t seed,
                                 int temp_space_copies)
    : engine_(engine),
      storage_(storage),
      temp_space_copies_(ResolveTempSpaceCopies(temp_space_copies)),
      seed_(seed) {
  TESSERA_CHECK(engine != nullptr && storage != nullptr);
}

ResourceManager::~ResourceManager() {
  std::vector<std::unique_ptr<ResourceState>> states;
  {
    // Not held while waiting: a function still running might call Request.
    MutexLock lock(&mu_);
    states.swap(states_);
  }
  for (const std::unique_ptr<ResourceState>& state : states) {
    // A failure stored here belongs to some operator that used the resource; after this
    // nobody can wait on the variable any more, so say it rather than drop it.
    if (absl::Status status = engine_->WaitForVar(state->var); !status.ok()) {
      spdlog::warn("ResourceManager: resource {} of {} carried a failure: {}", state->id,
                   state->ctx.ToString(), status.ToString());
    }
    if (state->type == ResourceRequest::kTempSpace) storage_->DirectFree(state->space);
    if (absl::Status status = engine_->DeleteVariable(nullptr, Context::CPU(), state->var);
        !status.ok()) {
      spdlog::error("ResourceManager: deleting the variable of resource {}: {}", state->id,
                    status.ToString());
    }
  }
}

ResourceState* ResourceManager::NewState(ResourceRequest::Type type, Context ctx) {
  auto state = std::make_unique<ResourceState>();
  state->type = type;
  state->ctx = ctx;
  state->var = engine_->NewVariable();
  state->id = next_id_++;
  state->random.Seed(seed_, RandomSubsequence(ctx));
  state->storage = storage_;
  states_.push_back(std::move(state));
  return states_.back().get();
}

absl::StatusOr<Resource> ResourceManager::Request(Context ctx, const ResourceRequest& request) {
  if (request.type != ResourceRequest::kRandom && request.type != ResourceRequest::kTempSpace) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown resource type ", static_cast<int>(request.type), " for ", ctx.ToString()));
  }
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(DeviceResources * found, Device(ctx));
  DeviceResources& device = *found;
  ResourceState* state = nullptr;
  if (request.type == ResourceRequest::kRandom) {
    if (device.random == nullptr) device.random = NewState(ResourceRequest::kRandom, ctx);
    state = device.random;
  } else {
    if (device.temp_spaces.empty()) {
      for (int i = 0; i < temp_space_copies_; ++i) {
        device.temp_spaces.push_back(NewState(ResourceRequest::kTempSpace, ctx));
      }
    }
    state = device.temp_spaces[device.next_temp_space++ % device.temp_spaces.size()];
  }
  return HandleOf(state);
}

absl::StatusOr<ResourceManager::DeviceResources*> ResourceManager::Device(Context ctx) {
  auto it = devices_.find(ctx);
  if (it == devices_.end()) {
    // A zero-byte allocation makes Storage check the device (negative ids, missing GPUs)
    // without allocating, so a bad context fails here and not inside an operator.
    absl::StatusOr<StorageHandle> probe = storage_->Alloc(0, ctx);
    if (!probe.ok()) return probe.status();
    it = devices_.emplace(ctx, DeviceResources{}).first;
  }
  return &it->second;
}

Resource ResourceManager::HandleOf(ResourceState* state) {
  Resource resource;
  resource.type = state->type;
  resource.var = state->var;
  resource.id = state->id;
  resource.ctx = state->ctx;
  resource.state_ = state;
  return resource;
}

absl::StatusOr<Resource> ResourceManager::RequestPrivateTempSpace(Context ctx) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(Device(ctx).status());
  return HandleOf(NewState(ResourceRequest::kTempSpace, ctx));
}

void ResourceManager::ReleasePrivateTempSpace(const Resource& resource) {
  std::shared_ptr<ResourceState> state;
  {
    MutexLock lock(&mu_);
    auto it = std::find_if(states_.begin(), states_.end(),
                           [&](const auto& s) { return s.get() == resource.state_; });
    TESSERA_CHECK(it != states_.end());
    state = std::move(*it);
    states_.erase(it);
  }
  // The deletion runs after every function using the buffer, and the function keeps the
  // state alive until then.
  Storage* storage = storage_;
  const VarHandle var = state->var;
  const Context ctx = state->ctx;
  absl::Status deleted = engine_->DeleteVariable(
      [storage, state](RunContext) {
        storage->DirectFree(state->space);
        return absl::OkStatus();
      },
      ctx, var);
  if (!deleted.ok()) {
    spdlog::error("ResourceManager: deleting the variable of private temp space {} on {}: {}",
                  resource.id, ctx.ToString(), deleted.ToString());
  }
}

absl::Status ResourceManager::SeedRandom(uint64_t seed) {
  MutexLock lock(&mu_);
  seed_ = seed;
  for (const auto& [ctx, device] : devices_) {
    ResourceState* state = device.random;
    if (state == nullptr) continue;
    // The generator is a host object for every device, so the reseed runs on the CPU.
    absl::Status pushed = engine_->PushSync(
        [state, seed](RunContext) {
          state->random.Seed(seed, RandomSubsequence(state->ctx));
          return absl::OkStatus();
        },
        Context::CPU(), /*const_vars=*/{}, /*mutate_vars=*/{state->var}, FnProperty::kNormal,
        /*priority=*/0, "ResourceManager::SeedRandom");
    if (!pushed.ok()) return pushed;
  }
  return absl::OkStatus();
}

}  // namespace tessera::engine

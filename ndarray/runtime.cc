#include "ndarray/runtime.h"

#include "core/status_macros.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<OwnedRuntime>> OwnedRuntime::Create(uint64_t seed) {
  ASSIGN_OR_RETURN(engine::EngineOptions engine_options, engine::EngineOptions::FromEnv());
  ASSIGN_OR_RETURN(engine::StorageOptions storage_options, engine::StorageOptions::FromEnv());
  return Create(engine_options, storage_options, seed);
}

absl::StatusOr<std::unique_ptr<OwnedRuntime>> OwnedRuntime::Create(
    const engine::EngineOptions& engine_options, const engine::StorageOptions& storage_options,
    uint64_t seed) {
  std::unique_ptr<OwnedRuntime> rt(new OwnedRuntime());
  ASSIGN_OR_RETURN(rt->engine_, engine::CreateEngine(engine_options));
  rt->storage_ = engine::Storage::Create(storage_options);
  rt->resources_ =
      std::make_unique<engine::ResourceManager>(rt->engine_.get(), rt->storage_.get(), seed);
  rt->runtime_ = Runtime{rt->engine_.get(), rt->storage_.get(), rt->resources_.get()};
  return rt;
}

OwnedRuntime::~OwnedRuntime() {
  if (engine_ != nullptr) (void)engine_->WaitForAll();  // failures were someone else's to see
  resources_.reset();  // waits for users of resources, frees their buffers
  if (engine_ != nullptr) (void)engine_->WaitForAll();  // chunk deletions pushed meanwhile
  engine_.reset();
  storage_.reset();
}

}  // namespace tessera

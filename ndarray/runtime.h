// Runtime: the engine, storage and resource manager an NDArray computes with, passed by
// value as a small non-owning environment (no hidden singletons: whoever owns the three,
// usually main() or a test fixture via OwnedRuntime, outlives every array made with them).
#ifndef TESSERA_NDARRAY_RUNTIME_H_
#define TESSERA_NDARRAY_RUNTIME_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/create_engine.h"
#include "engine/engine.h"
#include "engine/resource.h"
#include "engine/storage.h"

namespace tessera {

struct Runtime {
  engine::Engine* engine = nullptr;             // not owned
  engine::Storage* storage = nullptr;           // not owned
  engine::ResourceManager* resources = nullptr;  // not owned
};

// Owns an engine, a storage and a resource manager and destroys them in the right order
// (waiting for all pushed work first).
class OwnedRuntime {
 public:
  // Engine and storage options from the environment (TESSERA_ENGINE, ...), `seed` for the
  // random generators.
  static absl::StatusOr<std::unique_ptr<OwnedRuntime>> Create(uint64_t seed = 0);
  static absl::StatusOr<std::unique_ptr<OwnedRuntime>> Create(
      const engine::EngineOptions& engine_options, const engine::StorageOptions& storage_options,
      uint64_t seed = 0);
  ~OwnedRuntime();

  const Runtime& get() const { return runtime_; }

 private:
  OwnedRuntime() = default;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Storage> storage_;
  std::unique_ptr<engine::ResourceManager> resources_;
  Runtime runtime_;
};

}  // namespace tessera

#endif  // TESSERA_NDARRAY_RUNTIME_H_

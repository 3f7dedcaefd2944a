#include "fuzz/fuzz_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "engine/create_engine.h"
#include "engine/storage.h"

namespace tessera::fuzz {

const Runtime& FuzzRuntime() {
  static const std::unique_ptr<OwnedRuntime> owned = [] {
    engine::EngineOptions engine_options;
    engine_options.kind = engine::EngineOptions::Kind::kNaive;
    engine::StorageOptions storage_options;
    storage_options.cpu_limit_bytes = size_t{1} << 30;
    auto created = OwnedRuntime::Create(engine_options, storage_options, /*seed=*/0);
    if (!created.ok()) {
      std::fprintf(stderr, "fuzz runtime: %s\n", created.status().ToString().c_str());
      std::abort();
    }
    return std::move(*created);
  }();
  return owned->get();
}

}  // namespace tessera::fuzz

// KVStore::Create: the one place store types are chosen by name.
#include "kvstore/kvstore.h"

#include "absl/strings/str_cat.h"
#include "kvstore/internal/local_kvstore.h"

namespace tessera::kvstore {

absl::StatusOr<std::unique_ptr<KVStore>> KVStore::Create(const std::string& type) {
  using internal::LocalKVStore;
  using internal::LocalMode;
  if (type == "local" || type == "local_update_cpu") {
    return std::make_unique<LocalKVStore>(type, LocalMode::kUpdateCpu);
  }
  if (type == "local_allreduce_cpu") {
    return std::make_unique<LocalKVStore>(type, LocalMode::kAllreduceCpu);
  }
  if (type == "local_allreduce_device") {
    return std::make_unique<LocalKVStore>(type, LocalMode::kAllreduceDevice);
  }
  if (type == "dist_sync" || type == "dist_async") {
    return absl::UnimplementedError(
        absl::StrCat("KVStore type \"", type, "\" needs the parameter servers (issue 6)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown KVStore type \"", type,
      "\" (known: local, local_update_cpu, local_allreduce_cpu, local_allreduce_device, "
      "dist_sync, dist_async)"));
}

}  // namespace tessera::kvstore

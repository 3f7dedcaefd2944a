// KVStore::Create: the one place store types are chosen by name.
#include "kvstore/kvstore.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/dist_kvstore.h"
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
  if (type == "local_allreduce_device" || type == "device" || type == "nccl") {
    return std::make_unique<LocalKVStore>(type, LocalMode::kAllreduceDevice);
  }
  if (type == "dist_sync" || type == "dist_async") {
    ASSIGN_OR_RETURN(DistKVStoreOptions options, DistKVStoreOptionsFromEnvironment());
    return CreateDistKVStore(type, options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown KVStore type \"", type,
      "\" (known: local, local_update_cpu, local_allreduce_cpu, local_allreduce_device (also "
      "device, nccl), dist_sync, dist_async)"));
}

absl::StatusOr<std::string> KVStore::SaveOptimizerStates() {
  Optimizer* opt = optimizer();
  if (opt == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("KVStore \"", type_, "\": no optimizer set"));
  }
  return opt->SaveState();
}

absl::Status KVStore::LoadOptimizerStates(const Runtime& rt, const std::string& bytes) {
  Optimizer* opt = optimizer();
  if (opt == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("KVStore \"", type_, "\": no optimizer set"));
  }
  return opt->LoadState(rt, bytes);
}

}  // namespace tessera::kvstore

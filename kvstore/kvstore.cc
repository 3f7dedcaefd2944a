// KVStore::Create and ParseKVStoreType: the one place store types are told apart by name.
#include "kvstore/kvstore.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/internal/local_kvstore.h"

namespace tessera::kvstore {

namespace {

struct TypeName {
  const char* name;
  KVStoreKind kind;
};
constexpr TypeName kTypes[] = {
    {"local", {.local_update = true}},
    {"local_update_cpu", {.local_update = true}},
    {"local_allreduce_cpu", {}},
    {"local_allreduce_device", {}},
    {"device", {.used_on_one_device = true}},
    {"nccl", {.used_on_one_device = true}},
    {"dist_sync", {.dist = true, .used_on_one_device = true}},
    {"dist_async", {.dist = true, .sync = false, .used_on_one_device = true}},
};

}  // namespace

std::string KnownKVStoreTypes() {
  std::string names;
  for (const TypeName& t : kTypes) absl::StrAppend(&names, names.empty() ? "" : ", ", t.name);
  return names;
}

absl::StatusOr<KVStoreKind> ParseKVStoreType(absl::string_view type) {
  for (const TypeName& t : kTypes) {
    if (type == t.name) return t.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KVStore type \"", type, "\" (known: ", KnownKVStoreTypes(), ")"));
}

absl::StatusOr<std::unique_ptr<KVStore>> KVStore::Create(const std::string& type) {
  using internal::LocalKVStore;
  using internal::LocalMode;
  ASSIGN_OR_RETURN(const KVStoreKind kind, ParseKVStoreType(type));
  if (kind.dist) {
    ASSIGN_OR_RETURN(DistKVStoreOptions options, DistKVStoreOptionsFromEnvironment());
    return CreateDistKVStore(type, options);
  }
  if (kind.local_update) return std::make_unique<LocalKVStore>(type, LocalMode::kUpdateCpu);
  if (type == "local_allreduce_cpu") {
    return std::make_unique<LocalKVStore>(type, LocalMode::kAllreduceCpu);
  }
  return std::make_unique<LocalKVStore>(type, LocalMode::kAllreduceDevice);
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

absl::StatusOr<std::vector<KeyCounters>> KVStore::RoundCounters() {
  return absl::UnimplementedError(
      absl::StrCat("KVStore \"", type_, "\" has no parameter servers to count rounds"));
}

absl::Status KVStore::RestoreWorkerState(const std::vector<NDArray>&) {
  return absl::FailedPreconditionError(
      absl::StrCat("KVStore \"", type_, "\" replaces no lost worker"));
}

absl::StatusOr<KVStore::RejoinPoint> KVStore::Rejoin(const std::vector<int>&, int) {
  return absl::FailedPreconditionError(
      absl::StrCat("KVStore \"", type_, "\" replaces no lost worker"));
}

}  // namespace tessera::kvstore

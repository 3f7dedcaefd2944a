// The optimizer an OptimizerSpec (proto/kvstore.proto) describes: what a parameter server runs
// for its workers, and a backup for its copy of a primary's keys.
#ifndef TESSERA_KVSTORE_INTERNAL_OPTIMIZER_SPEC_H_
#define TESSERA_KVSTORE_INTERNAL_OPTIMIZER_SPEC_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kvstore/optimizer.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

// Optimizer::Create(name, params), its lr_mult and wd_mult, and its scheduler; the refusal
// names what is wrong.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec);

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_OPTIMIZER_SPEC_H_

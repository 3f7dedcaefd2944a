// The fused update's kernels on the host: what FusedUpdateGpu's launches do, over a table in
// host memory (fused_update_table.h), with the CPU loops of update_kernels.h. The CPU's
// fused update runs it, so the table, its window of rows and its counters are the same
// mechanism on both devices and every test of it on the CPU tests the GPU's bookkeeping too.
#ifndef TESSERA_KVSTORE_INTERNAL_FUSED_UPDATE_HOST_H_
#define TESSERA_KVSTORE_INTERNAL_FUSED_UPDATE_HOST_H_

#include "kvstore/internal/fused_update_table.h"

namespace tessera::kvstore::internal {

// As FusedUpdateGpu(kind, table, clip, check_finite): the finiteness check, the update of
// every tensor with its group's hyperparameters of the row of update steps_done + 1, then
// the count. `clip` is implied by the rows' clip_gradient, as on the CPU always.
void FusedUpdateHost(FusedKind kind, const FusedTable& table, bool check_finite);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_FUSED_UPDATE_HOST_H_

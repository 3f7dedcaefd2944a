// The data movement of the local KVStores, as MXNet's src/kvstore/comm.h: copies between
// devices and the sum of several arrays, each one engine push carrying the caller's
// priority (NDArray's += always pushes at priority 0, and the trainer needs last-layer
// gradients to overtake the rest).
//
// Checks are the caller's (the store validates before it pushes anything); these functions
// only report what the engine refuses. Thread-safe as the engine.
#ifndef TESSERA_KVSTORE_INTERNAL_COMM_H_
#define TESSERA_KVSTORE_INTERNAL_COMM_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ndarray/ndarray.h"

namespace tessera::kvstore::internal {

// Whether host code can read the array's memory (CPU and pinned CPU memory).
inline bool OnHost(const NDArray& a) { return !a.ctx().is_gpu(); }

// CopyFromTo (ndarray/arithmetic.h) at `priority`.
absl::Status Copy(const NDArray& from, const NDArray& to, int priority);

// out = in[0] + in[1] + ... in that order (so every store sums alike), on out's device: every
// array on the host, or every array on out's GPU; all of out's shape and dtype; `in`
// non-empty.
absl::Status SumInto(absl::Span<const NDArray> in, const NDArray& out, int priority);

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_COMM_H_

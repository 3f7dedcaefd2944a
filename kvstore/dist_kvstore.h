// The distributed KVStores, "dist_sync" and "dist_async": the worker side of the parameter
// servers (server/ runs the other side; proto/kvstore.proto is the wire contract).
//
// Same interface as the local stores (kvstore.h), so a trainer trains distributed without
// change. A Push first sums the key's arrays of this worker's devices on the host (the
// two-level reduction of the seeds), then sends the sum to the servers holding the key;
// a Pull fetches the key's value from them and copies it to every output. Both are engine
// pushes that return at once, so a trainer's pushes overlap the rest of backward; on each
// server's stream the requests, and the server's replies to them, go by the caller's
// priority (Module's -index: the first layers' keys, which the next forward needs first,
// overtake the queued ones of later layers). Key placement balances bytes: a key of fewer
// than `bigarray_bound` elements lives whole on one server, the one holding the fewest
// elements when it is placed (an Init call places its largest keys first, so every worker
// running the same Init calls places alike); a larger one is cut into equal slices of at
// most that many elements, dealt to the servers in turn, the same count to each
// (key_slices.h), so one slice's round completes and its value comes back while the next
// slices still travel; keys must lie in [0, kSliceKeyStride). A server on this worker's host
// (a Unix socket) may share a key's part through memory (proto/kvstore.proto, MapKeyRequest):
// Init maps this worker's slot, and pushes and pulls of that part then go through it, the
// stream carrying only their headers.
//
// The optimizer set by SetOptimizer runs on the servers (update_on_kvstore): every worker
// sends its description (name, parameters, lr/wd multipliers, learning-rate schedule); the
// servers keep the first and ignore identical copies. Each server counts its own updates
// for the schedule, as MXNet's servers do. Without an optimizer the servers store the sum of a
// round's pushes (dist_sync) or the last push (dist_async), and a Pull returns that.
// Custom updater functions cannot run on a server: Push is UNIMPLEMENTED while one is set.
//
// Errors: the local stores' argument checks (INVALID_ARGUMENT naming the key and shapes)
// before anything is sent. A failure the servers report is stored on the key's arrays (the
// engine's error path) and returned by the next wait on them; a lost server or a dist_sync
// round that cannot complete (a worker left) also makes every later call return that
// UNAVAILABLE error at once. Barrier first waits for this worker's pending pushes and pulls
// and returns their first error.
//
// Thread safety: as kvstore.h: every method may be called from any thread.
#ifndef TESSERA_KVSTORE_DIST_KVSTORE_H_
#define TESSERA_KVSTORE_DIST_KVSTORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancellation.h"
#include "kvstore/cluster_spec.h"
#include "kvstore/kvstore.h"
#include "rpc/transport_security.h"

namespace tessera::kvstore {

// MXNet's MXNET_KVSTORE_BIGARRAY_BOUND default.
inline constexpr int64_t kDefaultBigArrayBound = 1000000;

struct DistKVStoreOptions {
  ClusterSpec cluster;  // this worker's rank and the servers' addresses
  // Arrays of at least this many elements are cut into slices of at most this many, spread
  // over every server (key_slices.h).
  int64_t bigarray_bound = kDefaultBigArrayBound;
  // This run's identity, the same on every worker (proto/kvstore.proto, Hello.job_id).
  std::string job_id;
  // How long to wait for the servers to come up (workers may start first).
  absl::Duration connect_timeout = absl::Seconds(60);
  // How long a worker waits for a lost server's backup to take its keys over (a majority of
  // the workers must ask it: docs/replication.md) before its requests of those keys fail.
  absl::Duration failover_timeout = absl::Seconds(60);
  // TLS and the cluster token for the servers' connections (rpc/transport_security.h).
  rpc::TransportSecurity security;
  // The job replaces lost workers (JobSpec.recovery.replace_workers): the servers hold the
  // rounds a lost worker blocks for its replacement instead of failing them.
  bool replace_workers = false;
  // This worker replaces the rank's lost one (KVStore::Rejoin).
  bool rejoin = false;
  // Compressed transfers (kvstore/internal/compression.h). The pushes ("2bit" with its
  // threshold, as MXNet's, or "fp16"; empty type: none): compressed here with a residual per
  // key part, on the stream - the pushes of a compressing worker do not go through shared
  // memory. The pulls (pull_type "bf16"; empty: float32): the servers answer in bfloat16.
  GradientCompression compression;
  // Not owned, may be null; must outlive the store. When it fires, connecting stops and the
  // servers' streams are cut: every pending and later call fails at once.
  Cancellation* cancellation = nullptr;
};

// Connects to every server of `options.cluster` as worker `cluster.index`; `type` is
// "dist_sync" or "dist_async" (INVALID_ARGUMENT otherwise).
absl::StatusOr<std::unique_ptr<KVStore>> CreateDistKVStore(const std::string& type,
                                                           const DistKVStoreOptions& options);

// Options from the process environment, as KVStore::Create("dist_*") uses them: the cluster
// spec (cluster_spec.h), TESSERA_KVSTORE_BIGARRAY_BOUND (or MXNet's
// MXNET_KVSTORE_BIGARRAY_BOUND), and TESSERA_TLS_DIR / TESSERA_TOKEN_FILE. The role must be
// worker.
absl::StatusOr<DistKVStoreOptions> DistKVStoreOptionsFromEnvironment();

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_DIST_KVSTORE_H_

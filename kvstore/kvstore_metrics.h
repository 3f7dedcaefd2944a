// The KVStore's Prometheus metrics (core/metrics.h): a worker's traffic to the parameter
// servers, and a server's traffic and updates. Each side's families are registered on first
// use, so a daemon exports only its own.
#ifndef TESSERA_KVSTORE_KVSTORE_METRICS_H_
#define TESSERA_KVSTORE_KVSTORE_METRICS_H_

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tessera::kvstore {

// A worker's dist store: bytes sent and received, and each push's and pull's time from
// sending to the last server's reply (for dist_sync pulls, the wait for the round included).
struct ClientMetrics {
  prometheus::Counter& push_bytes;
  prometheus::Counter& pull_bytes;
  prometheus::Histogram& push_seconds;
  prometheus::Histogram& pull_seconds;
};
ClientMetrics& KVStoreClientMetrics();

// A parameter server: bytes received in pushes and sent in pulls, updates applied (dist_sync:
// one per completed round, dist_async: one per push), completed dist_sync rounds and how long
// each stayed open waiting for the workers.
struct ServerMetrics {
  prometheus::Counter& push_bytes;
  prometheus::Counter& pull_bytes;
  prometheus::Counter& updates;
  prometheus::Counter& rounds;
  prometheus::Histogram& round_seconds;
  // Replication (docs/replication.md): as a primary, the updates the backup acknowledged,
  // their value bytes, the time from sending one to its acknowledgement, and the jobs in
  // which the backup was lost; as a backup, the updates applied to its copy.
  prometheus::Counter& replica_updates;
  prometheus::Counter& replica_bytes;
  prometheus::Histogram& replica_seconds;
  prometheus::Counter& backup_losses;
  prometheus::Counter& backup_updates;
};
// The process's (registered on ProcessMetrics() on first use).
ServerMetrics& KVStoreServerMetrics();
// The families registered on `registry`: a server of its own (a test's, or one of several
// in a process) counts only what it serves.
ServerMetrics NewServerMetrics(prometheus::Registry& registry);

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_KVSTORE_METRICS_H_

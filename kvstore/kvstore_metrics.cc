#include "kvstore/kvstore_metrics.h"

#include <string>

#include "core/metrics.h"

namespace tessera::kvstore {
namespace {

prometheus::Counter& NewCounter(const std::string& name, const std::string& help,
                                prometheus::Registry& registry = ProcessMetrics()) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Histogram& NewLatency(const std::string& name, const std::string& help,
                                  prometheus::Registry& registry = ProcessMetrics()) {
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(registry)
      .Add({}, LatencyBuckets());
}

}  // namespace

ClientMetrics& KVStoreClientMetrics() {
  static auto* metrics = new ClientMetrics{
      NewCounter("tessera_kvstore_push_bytes_total", "Bytes this worker pushed to the servers"),
      NewCounter("tessera_kvstore_pull_bytes_total", "Bytes this worker pulled from the servers"),
      NewLatency("tessera_kvstore_push_seconds",
                 "Time from sending a key's push to every server's acknowledgement"),
      NewLatency("tessera_kvstore_pull_seconds",
                 "Time from requesting a key's pull to its last byte (dist_sync: the round's "
                 "wait included)"),
  };
  return *metrics;
}

ServerMetrics NewServerMetrics(prometheus::Registry& registry) {
  return ServerMetrics{
      NewCounter("tessera_ps_push_bytes_total", "Bytes of pushes this server received", registry),
      NewCounter("tessera_ps_pull_bytes_total", "Bytes of pulls this server sent", registry),
      NewCounter("tessera_ps_updates_total",
                 "Updates applied to keys (dist_sync: completed rounds; dist_async: pushes)",
                 registry),
      NewCounter("tessera_ps_rounds_total", "dist_sync rounds completed, over all keys", registry),
      NewLatency("tessera_ps_round_seconds",
                 "How long a dist_sync round stayed open, from its first push to its last",
                 registry),
      NewCounter("tessera_ps_replica_updates_total",
                 "Updates of this server's keys its backup acknowledged", registry),
      NewCounter("tessera_ps_replica_bytes_total",
                 "Value bytes of the updates this server sent its backup", registry),
      NewLatency("tessera_ps_replica_seconds",
                 "Time from sending the backup an update to its acknowledgement", registry),
      NewCounter("tessera_ps_backup_losses_total",
                 "Jobs in which this server lost its backup and went on with one copy", registry),
      NewCounter("tessera_ps_backup_updates_total",
                 "Updates this server applied to its copy of its primary's keys", registry),
  };
}

ServerMetrics& KVStoreServerMetrics() {
  static auto* metrics = new ServerMetrics(NewServerMetrics(ProcessMetrics()));
  return *metrics;
}

}  // namespace tessera::kvstore

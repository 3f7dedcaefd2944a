// The daemons' --metrics_address flag, defined once: where to serve Prometheus metrics
// (rpc/metrics_server.h), secured with the daemon's own TLS files and cluster token.
#ifndef TESSERA_RPC_METRICS_FLAGS_H_
#define TESSERA_RPC_METRICS_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "rpc/metrics_server.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {

// The metrics server --metrics_address asks for, or null when it is empty (the default). It
// serves `collectables` (not owned; they outlive the server) and logs where, as `daemon`.
absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServerFromFlags(
    const std::string& daemon, const TransportSecurity& security,
    std::vector<const prometheus::Collectable*> collectables);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_METRICS_FLAGS_H_

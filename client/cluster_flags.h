// The flags by which a `tessera` command reaches a standing cluster, parsed in one place:
//   --workers H:P,...   every worker daemon, rank order (the first coordinates jobs)
//   --servers H:P,...   the parameter servers
//   --tls_dir DIR, --token_file FILE, --insecure   (or TESSERA_TLS_DIR, TESSERA_TOKEN_FILE,
//                       TESSERA_INSECURE=1; rpc/transport_security.h)
#ifndef TESSERA_CLIENT_CLUSTER_FLAGS_H_
#define TESSERA_CLIENT_CLUSTER_FLAGS_H_

#include "absl/status/statusor.h"
#include "jobs/job_client.h"
#include "rpc/transport_security.h"

namespace tessera::client {

struct ClusterFlags {
  jobs::Cluster cluster;  // security is filled in by Resolve
  rpc::TransportSecuritySources security;

  // When argv[*i] is one of the flags above: takes it (and its value, advancing *i) and
  // returns true. False for any other argument; INVALID_ARGUMENT for a flag without its value.
  absl::StatusOr<bool> Consume(int argc, char** argv, int* i);
  // The cluster with its security loaded (errors name the file).
  absl::StatusOr<jobs::Cluster> Resolve() const;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CLUSTER_FLAGS_H_

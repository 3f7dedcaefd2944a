#include "client/cluster_flags.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace tessera::client {

absl::StatusOr<bool> ClusterFlags::Consume(int argc, char** argv, int* i) {
  const std::string arg = argv[*i];
  if (arg == "--insecure") {
    security.insecure = true;
    return true;
  }
  if (arg != "--workers" && arg != "--servers" && arg != "--tls_dir" && arg != "--token_file") {
    return false;
  }
  if (*i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
  const std::string value = argv[++*i];
  if (arg == "--tls_dir") {
    security.tls_dir = value;
  } else if (arg == "--token_file") {
    security.token_file = value;
  } else {
    std::vector<std::string> hosts = absl::StrSplit(value, ',', absl::SkipEmpty());
    if (hosts.empty()) return absl::InvalidArgumentError(absl::StrCat(arg, " needs host:port,..."));
    (arg == "--workers" ? cluster.workers : cluster.servers) = std::move(hosts);
  }
  return true;
}

absl::StatusOr<jobs::Cluster> ClusterFlags::Resolve() const {
  jobs::Cluster resolved = cluster;
  ASSIGN_OR_RETURN(resolved.security, rpc::LoadTransportSecurity(security));
  return resolved;
}

}  // namespace tessera::client

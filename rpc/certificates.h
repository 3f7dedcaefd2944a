// A cluster's certificates, made with OpenSSL: one CA, and per host a folder that
// --tls_dir can name (ca.pem, cert.pem, key.pem). Every host certificate serves and
// authenticates as a client (mutual TLS), and names its host as a DNS name or IP address
// (wildcards such as *.tessera-ps.default.svc work, for StatefulSet pods). A host entry of
// several names joined by '+' ("*.tessera-ps+*.tessera-worker") gets one certificate naming
// them all, in the folder of the first: one Secret for every pod of a cluster.
//
//   DIR/ca.pem, DIR/ca.key        the CA (made once; later calls add hosts with it)
//   DIR/HOST/{ca.pem,cert.pem,key.pem}
//
// Private keys are written readable by their owner only.
#ifndef TESSERA_RPC_CERTIFICATES_H_
#define TESSERA_RPC_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::rpc {

struct CertificateOptions {
  std::string dir;
  std::vector<std::string> hosts;
  int valid_days = 365;
};

// The host folders, in the order of `options.hosts`. INVALID_ARGUMENT for no hosts or a host
// that is not a DNS name or IP address; errors naming the file otherwise. An existing host
// folder's files are replaced.
absl::StatusOr<std::vector<std::string>> MakeCertificates(const CertificateOptions& options);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_CERTIFICATES_H_

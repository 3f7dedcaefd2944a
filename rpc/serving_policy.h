// Who may serve what where: the one rule every Tessera server (gRPC or the metrics endpoint)
// follows before it binds an address.
//
//   - a Unix socket: plaintext, TLS settings or not, as only this machine's processes that
//     may open its file can connect;
//   - TLS settings given: TLS (mutual when require_client_cert), on any other address;
//   - otherwise a loopback address: only this machine can connect;
//   - otherwise plaintext only with `insecure` (and a warning); without it the server is
//     refused with a message saying how to set TLS and a token up.
// An address beyond the machine also needs a cluster token unless `insecure`.
#ifndef TESSERA_RPC_SERVING_POLICY_H_
#define TESSERA_RPC_SERVING_POLICY_H_

#include <string>

#include "absl/status/statusor.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {

enum class ServingTransport {
  kTls,         // TLS with the process's certificate
  kLoopback,    // plaintext TCP that never leaves the machine
  kUnixSocket,  // plaintext on a Unix socket: less kernel work per byte than loopback TCP
  kPlaintext,   // plaintext beyond the machine (--insecure)
};

// PERMISSION_DENIED, naming `name` and `address` and saying what to set, when `security`
// may not serve `address`.
absl::StatusOr<ServingTransport> ChooseServingTransport(const std::string& name,
                                                        const std::string& address,
                                                        const TransportSecurity& security);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_SERVING_POLICY_H_

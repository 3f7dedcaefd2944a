// The daemons' security flags, defined once: --tls_dir, --token_file, --mtls, --insecure
// (each falls back to its TESSERA_* variable, rpc/transport_security.h).
#ifndef TESSERA_RPC_SECURITY_FLAGS_H_
#define TESSERA_RPC_SECURITY_FLAGS_H_

#include "absl/status/statusor.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {

absl::StatusOr<TransportSecurity> TransportSecurityFromFlags();

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_SECURITY_FLAGS_H_

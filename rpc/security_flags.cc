#include "rpc/security_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_dir, "",
          "folder with ca.pem, cert.pem, key.pem (from `tessera certs`): serve and dial over TLS "
          "(TESSERA_TLS_DIR)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the cluster token every call must carry (TESSERA_TOKEN_FILE)");
ABSL_FLAG(bool, mtls, false, "require clients to present a certificate of the CA (TESSERA_MTLS=1)");
ABSL_FLAG(bool, insecure, false,
          "allow plaintext without token checks on addresses beyond loopback (TESSERA_INSECURE=1)");

namespace tessera::rpc {

absl::StatusOr<TransportSecurity> TransportSecurityFromFlags() {
  return LoadTransportSecurity({.tls_dir = absl::GetFlag(FLAGS_tls_dir),
                                .token_file = absl::GetFlag(FLAGS_token_file),
                                .mtls = absl::GetFlag(FLAGS_mtls),
                                .insecure = absl::GetFlag(FLAGS_insecure)});
}

}  // namespace tessera::rpc

// How a Tessera process secures its gRPC connections, as servers and as clients:
//
//   - TLS from a folder holding ca.pem (the cluster's CA), cert.pem and key.pem (this
//     process's identity: servers need them; clients present them for mutual TLS);
//   - a cluster token every call carries ("authorization: Bearer ..."), from a file (a
//     Kubernetes Secret mounts as one);
//   - neither, on loopback only, unless `insecure` says plaintext beyond it is wanted.
//
// rpc/server.h and rpc/channel.h turn it into credentials; this file only loads it.
#ifndef TESSERA_RPC_TRANSPORT_SECURITY_H_
#define TESSERA_RPC_TRANSPORT_SECURITY_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera::rpc {

struct TransportSecurity {
  std::string ca_pem;    // PEM; empty: no TLS
  std::string cert_pem;  // this process's certificate chain (PEM)
  std::string key_pem;   // its private key (PEM)
  // Servers: refuse clients without a certificate signed by ca_pem (mutual TLS).
  bool require_client_cert = false;
  std::string token;  // the cluster token; empty: none
  // Serve and dial beyond loopback in plaintext, without token checks (tokens would cross
  // the network in the clear). Off by default; a server warns when it is on.
  bool insecure = false;

  bool tls() const { return !ca_pem.empty(); }
};

// Where a process's settings come from: its flags, else the environment
// (TESSERA_TLS_DIR, TESSERA_TOKEN_FILE, TESSERA_MTLS=1, TESSERA_INSECURE=1).
struct TransportSecuritySources {
  std::string tls_dir;
  std::string token_file;
  bool mtls = false;
  bool insecure = false;
};

inline constexpr char kCaFile[] = "ca.pem";
inline constexpr char kCertFile[] = "cert.pem";
inline constexpr char kKeyFile[] = "key.pem";

// Reads the files the sources name. Errors name the flag and the file: a TLS folder without
// ca.pem, only one of cert.pem and key.pem, --mtls without a certificate, an empty or
// unreadable token file.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(TransportSecuritySources sources);

// The token in `path`, surrounding whitespace removed; INVALID_ARGUMENT when it is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A fresh token: 32 bytes from OpenSSL's CSPRNG, hex-encoded.
absl::StatusOr<std::string> NewToken();

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_TRANSPORT_SECURITY_H_

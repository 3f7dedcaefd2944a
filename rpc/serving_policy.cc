#include "rpc/serving_policy.h"

#include "absl/strings/str_cat.h"
#include "rpc/address.h"
#include "spdlog/spdlog.h"

namespace tessera::rpc {
namespace {

constexpr char kHowToSecure[] =
    "make certificates with `tessera certs DIR --hosts HOST,...`, then give every daemon and "
    "client --tls_dir DIR/HOST and --token_file FILE (or TESSERA_TLS_DIR, TESSERA_TOKEN_FILE); "
    "--insecure serves plaintext to anyone who can reach the port";

}  // namespace

absl::StatusOr<ServingTransport> ChooseServingTransport(const std::string& name,
                                                        const std::string& address,
                                                        const TransportSecurity& security) {
  auto refuse = [&](absl::string_view why) {
    return absl::PermissionDeniedError(
        absl::StrCat(name, ": will not serve ", address, " ", why, ": ", kHowToSecure));
  };
  // A Unix socket never leaves the machine: TLS would add nothing (channels to one use
  // local credentials too), and the token is still checked.
  if (IsUnixSocketAddress(address)) return ServingTransport::kUnixSocket;
  const bool loopback = IsLoopbackHost(HostOf(address));
  ServingTransport transport;
  if (security.tls()) {
    if (security.cert_pem.empty()) {
      return refuse("over TLS without cert.pem and key.pem in --tls_dir");
    }
    transport = ServingTransport::kTls;
  } else if (loopback) {
    transport = ServingTransport::kLoopback;
  } else if (security.insecure) {
    spdlog::warn(
        "{}: serving {} in plaintext without token checks (--insecure): anyone who can "
        "reach it controls this daemon",
        name, address);
    return ServingTransport::kPlaintext;
  } else {
    return refuse("(beyond this machine) without TLS and a cluster token");
  }
  if (security.token.empty() && !loopback && !security.insecure) {
    return refuse("(beyond this machine) without a cluster token");
  }
  return transport;
}

}  // namespace tessera::rpc

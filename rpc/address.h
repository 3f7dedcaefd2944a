// Addresses as Tessera's flags and cluster specs write them: host:port ("10.0.0.2:9000",
// "tessera-ps-0.tessera-ps:9000", "[::1]:9000", ":9000"), or a Unix socket in gRPC's syntax
// ("unix:/tmp/tessera-sockets-x1Yz/ps-0.sock").
#ifndef TESSERA_RPC_ADDRESS_H_
#define TESSERA_RPC_ADDRESS_H_

#include <sys/un.h>

#include <string>

#include "absl/strings/string_view.h"

namespace tessera::rpc {

// The host part, brackets removed ("" for ":9000"); the whole string when it has no port.
std::string HostOf(absl::string_view address);

// Whether `host` names this machine's loopback interface only: localhost, 127.0.0.0/8,
// ::1. "", 0.0.0.0 and :: (every interface) are not.
bool IsLoopbackHost(absl::string_view host);

// Whether `address` is a Unix socket ("unix:PATH"): only processes of this machine that may
// open PATH's folder can connect. (gRPC's abstract sockets, "unix-abstract:", are not: any
// process of the machine can reach them.)
bool IsUnixSocketAddress(absl::string_view address);

// The longest PATH a Unix socket address may have (sockaddr_un's sun_path, less its NUL).
inline constexpr size_t kMaxUnixSocketPath = sizeof(sockaddr_un{}.sun_path) - 1;

// "host:port", brackets around an IPv6 host, 0.0.0.0 for an empty one: an address as bound,
// for logs ("0.0.0.0:7000", "[::1]:9100").
std::string BoundAddress(absl::string_view host, int port);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_ADDRESS_H_

// Host:port strings as Tessera's flags and cluster specs write them ("10.0.0.2:9000",
// "tessera-ps-0.tessera-ps:9000", "[::1]:9000", ":9000").
#ifndef TESSERA_RPC_ADDRESS_H_
#define TESSERA_RPC_ADDRESS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tessera::rpc {

// The host part, brackets removed ("" for ":9000"); the whole string when it has no port.
std::string HostOf(absl::string_view address);

// Whether `host` names this machine's loopback interface only: localhost, 127.0.0.0/8,
// ::1. "", 0.0.0.0 and :: (every interface) are not.
bool IsLoopbackHost(absl::string_view host);

// "host:port", brackets around an IPv6 host, 0.0.0.0 for an empty one: an address as bound,
// for logs ("0.0.0.0:7000", "[::1]:9100").
std::string BoundAddress(absl::string_view host, int port);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_ADDRESS_H_

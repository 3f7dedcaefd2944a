#include "rpc/address.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera::rpc {

std::string HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return std::string(
        address.substr(1, close == absl::string_view::npos ? absl::string_view::npos : close - 1));
  }
  // One colon: host:port. Several without brackets: a bare IPv6 address.
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || address.find(':') != colon) return std::string(address);
  return std::string(address.substr(0, colon));
}

bool IsLoopbackHost(absl::string_view host) {
  const std::string name = absl::AsciiStrToLower(host);
  if (name == "localhost" || absl::EndsWith(name, ".localhost")) return true;
  in_addr v4;
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, name.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

bool IsUnixSocketAddress(absl::string_view address) { return absl::StartsWith(address, "unix:"); }

std::string BoundAddress(absl::string_view host, int port) {
  if (host.empty()) host = "0.0.0.0";
  return host.find(':') != absl::string_view::npos ? absl::StrCat("[", host, "]:", port)
                                                   : absl::StrCat(host, ":", port);
}

}  // namespace tessera::rpc

// The one place Tessera builds a gRPC channel, mirroring rpc/server.h: TLS when the
// settings hold a CA (presenting cert.pem/key.pem for mutual TLS when given), local
// credentials to a loopback target or a Unix socket, plaintext elsewhere only with
// `insecure`; the cluster token on every call when one is given; keepalive; the service's
// message limits.
#ifndef TESSERA_RPC_CHANNEL_H_
#define TESSERA_RPC_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "rpc/message_limits.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {

struct ChannelConfig {
  std::string target;  // host:port, or "unix:PATH" (rpc/address.h)
  TransportSecurity security;
  MessageLimits limits;  // this end's: MessageLimits::Peer() of the server's
  // A TCP connection of its own, even when this process already has one to `target`
  // (each worker's KVStore streams, so that one stalled stream is not everyone's).
  bool own_connection = false;
};

// PERMISSION_DENIED when the target is beyond loopback and neither TLS nor `insecure` is
// set (a token would cross the network in the clear); the message says what to set.
absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(const ChannelConfig& config);

// Waits until `channel` connects. UNAVAILABLE otherwise, naming `peer` and why gRPC could
// not connect: at once for settings that waiting cannot mend (a failed TLS handshake, a peer
// that closes every connection as one end speaks plaintext to the other's TLS), else after
// `timeout` (a refused connection: the peer may still be starting).
// CANCELLED within a second once `cancelled` (when given) returns true.
absl::Status WaitUntilConnected(grpc::Channel& channel, const std::string& peer,
                                absl::Duration timeout,
                                const std::function<bool()>& cancelled = nullptr);

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_CHANNEL_H_

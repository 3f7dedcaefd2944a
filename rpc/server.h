// The one place Tessera builds a gRPC server: credentials from TransportSecurity, the
// cluster token check, keepalive, message limits and gRPC's health service.
//
// Which transport a server gets for its address and settings: rpc/serving_policy.h. A
// token, when given, is checked on every call but health checks (rpc/token_auth.h).
#ifndef TESSERA_RPC_SERVER_H_
#define TESSERA_RPC_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "rpc/message_limits.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {

struct ServerConfig {
  std::string name;     // for messages: "parameter server 0", "tessera-worker"
  // host:port (port 0 picks a free one), or a Unix socket "unix:PATH" (rpc/address.h):
  // PATH's folder decides who may connect, so keep it private to the cluster's owner.
  std::string address;
  TransportSecurity security;
  MessageLimits limits;
  // gRPC's resource quota, so no flood of clients exhausts the daemon: what gRPC's buffers
  // of every connection together may take (gRPC reclaims from connections as they near it),
  // and its threads for synchronous calls (a call beyond them is RESOURCE_EXHAUSTED).
  size_t memory_quota_bytes = size_t{1} << 30;
  int max_threads = 256;
  std::vector<grpc::Service*> services;                     // not owned; must outlive the server
  grpc::CallbackGenericService* generic_service = nullptr;  // methods no service has
};

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // 0 on a Unix socket
  // An address clients can dial: the bound host, or 127.0.0.1 for a wildcard one.
  std::string address;
  // The address as bound, with the port gRPC picked ("0.0.0.0:7000"): what logs show.
  std::string listening;
};

// Errors: PERMISSION_DENIED for an unsafe configuration (the message says what to set),
// UNAVAILABLE when the address cannot be bound; both name the server and the address.
absl::StatusOr<RunningServer> StartServer(const ServerConfig& config);

// A daemon's gRPC set-up, called once before serving, after OnTerminationSignal
// (core/daemon.h): the threads gRPC starts must inherit its signal mask.
//   - gRPC stays initialized until the process exits. Without it, destroying a daemon's
//     server runs gRPC's library shutdown, which joins gRPC's executor threads; one parked in
//     a poll on a reconnect or keepalive timer holds the exit for up to 10 s after the daemon
//     has stopped.
//   - absl::Mutex, which gRPC locks on every call, skips its deadlock detection. Debian's
//     Abseil is built without NDEBUG, so every lock would otherwise update a global lock
//     graph under a global lock.
void SetUpGrpcForDaemon();

// Keepalive settings of every server and channel: pings every 5 s both ways, a peer
// silent for 10 s more is dropped, so a hung or vanished peer is noticed within 15 s.
inline constexpr int kKeepaliveTimeMs = 5000;
inline constexpr int kKeepaliveTimeoutMs = 10000;

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_SERVER_H_

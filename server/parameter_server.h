// ParameterServer: a running gRPC server around one ServerStore - what `tessera-ps` runs,
// and what tests and benchmarks start in-process on loopback.
//
// Start binds (port 0 picks a free port: see port()), serves the KVStore service and gRPC's
// standard health service, and returns. Wait blocks until a stop command or Shutdown.
//
// Thread safety: Shutdown may be called from any thread, also while another waits.
#ifndef TESSERA_SERVER_PARAMETER_SERVER_H_
#define TESSERA_SERVER_PARAMETER_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "kvstore/server_node.h"
#include "ndarray/runtime.h"
#include "rpc/transport_security.h"
#include "server/kvstore_service.h"

namespace tessera::server {

class ParameterServer {
 public:
  // Serves on `address` ("127.0.0.1:0", "[::]:9000", ...) with `security` (rpc/server.h:
  // beyond loopback only with TLS and a token, or insecure). With `backup` (an address), the
  // server replicates its key parts there (GrpcReplicaLink, dialled with `security`).
  // UNAVAILABLE naming the address when it cannot be bound; PERMISSION_DENIED for an unsafe
  // configuration.
  // `peers` (every server's address, by index; empty: none) are where the keys this server
  // takes over in a failover are copied to (kvstore/server_node.h).
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Start(
      const std::string& address, const kvstore::ServerStoreOptions& options,
      const rpc::TransportSecurity& security = {}, const std::string& backup = "",
      const std::vector<std::string>& peers = {});
  ~ParameterServer();  // Shutdown, then waits for every stream to end

  int port() const { return port_; }
  // "127.0.0.1:<port>" when bound to a wildcard or loopback host, else the given host.
  const std::string& address() const { return address_; }
  // As bound ("0.0.0.0:9000"), for logs.
  const std::string& listening_address() const { return listening_address_; }
  // The engine and storage the store computes with (for metrics).
  const Runtime& runtime() const { return runtime_->get(); }
  // What it serves (tests read a backup's copy through it): its own index's store, and the
  // stores of the index it took over in a failover.
  const kvstore::ServerStore& store() const { return node_->own(); }
  const kvstore::ServerNode& node() const { return *node_; }

  // Blocks until a stop command arrives or Shutdown is called; then shuts gRPC down.
  void Wait() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every stream (workers see UNAVAILABLE) and stops serving.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ParameterServer() = default;

  std::unique_ptr<OwnedRuntime> runtime_;
  std::unique_ptr<kvstore::ServerNode> node_;
  std::unique_ptr<KVStoreServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::string listening_address_;

  Mutex mu_;
  CondVar cv_;  // stop_requested_ or shut_down_ became true
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_PARAMETER_SERVER_H_

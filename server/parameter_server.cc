#include "server/parameter_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/address.h"
#include "rpc/server.h"
#include "server/replica_link.h"

namespace tessera::server {

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(
    const std::string& address, const kvstore::ServerStoreOptions& options,
    const rpc::TransportSecurity& security, const std::string& backup,
    const std::vector<std::string>& peers) {
  std::unique_ptr<ParameterServer> ps(new ParameterServer());
  ASSIGN_OR_RETURN(ps->runtime_, OwnedRuntime::Create());
  kvstore::ServerStoreOptions store_options = options;
  // A Unix socket's workers are on this host: bulk payloads can skip the socket.
  store_options.shared_memory = rpc::IsUnixSocketAddress(address);
  std::unique_ptr<kvstore::ReplicaLink> link;
  if (!backup.empty()) {
    link = std::make_unique<GrpcReplicaLink>(GrpcReplicaLink::Options{
        .target = backup, .security = security, .max_chunk_bytes = options.max_chunk_bytes});
  }
  kvstore::ServerNode::LinkFactory links;
  if (!peers.empty()) {
    // A server taking keys over copies them to their own server once it is back: waiting for
    // it is short, as it is likely still down (the store tries again later).
    links = [peers, security, chunk = options.max_chunk_bytes](int server)
        -> std::unique_ptr<kvstore::ReplicaLink> {
      if (server < 0 || server >= static_cast<int>(peers.size()) || peers[server].empty()) {
        return nullptr;
      }
      return std::make_unique<GrpcReplicaLink>(
          GrpcReplicaLink::Options{.target = peers[server],
                                   .security = security,
                                   .connect_timeout = absl::Seconds(2),
                                   .max_chunk_bytes = chunk});
    };
  }
  ps->node_ = std::make_unique<kvstore::ServerNode>(ps->runtime_->get(), store_options,
                                                   std::move(link), std::move(links));
  ParameterServer* raw = ps.get();
  ps->service_ = std::make_unique<KVStoreServiceImpl>(ps->node_.get(), [raw] {
    MutexLock lock(&raw->mu_);
    raw->stop_requested_ = true;
    raw->cv_.SignalAll();
  });
  ASSIGN_OR_RETURN(
      rpc::RunningServer running,
      rpc::StartServer({.name = absl::StrCat("parameter server ", options.server_index),
                        .address = address,
                        .security = security,
                        .limits = rpc::kKVStoreLimits,
                        .services = {ps->service_.get()}}));
  ps->server_ = std::move(running.server);
  ps->port_ = running.port;
  ps->address_ = std::move(running.address);
  ps->listening_address_ = std::move(running.listening);
  return ps;
}

ParameterServer::~ParameterServer() {
  Shutdown();
  if (server_ != nullptr) server_->Wait();
}

void ParameterServer::Wait() {
  {
    MutexLock lock(&mu_);
    while (!stop_requested_ && !shut_down_) cv_.Wait(&mu_);
  }
  Shutdown();
}

void ParameterServer::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    cv_.SignalAll();
  }
  if (server_ == nullptr) return;  // Start failed before serving
  // Streams still open after the deadline are cancelled: their workers see UNAVAILABLE.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace tessera::server

#include "server/parameter_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "grpcpp/health_check_service_interface.h"
#include "kvstore/transport.h"

namespace tessera::server {

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(
    const std::string& address, const kvstore::ServerStoreOptions& options) {
  std::unique_ptr<ParameterServer> ps(new ParameterServer());
  ASSIGN_OR_RETURN(ps->runtime_, OwnedRuntime::Create());
  ps->store_ = std::make_unique<kvstore::ServerStore>(ps->runtime_->get(), options);
  ParameterServer* raw = ps.get();
  ps->service_ = std::make_unique<KVStoreServiceImpl>(ps->store_.get(), [raw] {
    std::lock_guard<std::mutex> lock(raw->mu_);
    raw->stop_requested_ = true;
    raw->cv_.notify_all();
  });
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  kvstore::ConfigureKVStoreServer(builder);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &ps->port_);
  builder.RegisterService(ps->service_.get());
  ps->server_ = builder.BuildAndStart();
  if (ps->server_ == nullptr || ps->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("parameter server ", options.server_index,
                                               ": cannot listen on ", address));
  }
  const std::string host = address.substr(0, address.rfind(':'));
  const bool local = host.empty() || host == "0.0.0.0" || host == "[::]" || host == "localhost";
  ps->address_ = absl::StrCat(local ? "127.0.0.1" : host, ":", ps->port_);
  return ps;
}

ParameterServer::~ParameterServer() {
  Shutdown();
  if (server_ != nullptr) server_->Wait();
}

void ParameterServer::Wait() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_requested_ || shut_down_; });
  }
  Shutdown();
}

void ParameterServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    cv_.notify_all();
  }
  // Streams still open after the deadline are cancelled: their workers see UNAVAILABLE.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace tessera::server

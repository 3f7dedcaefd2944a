#include "rpc/server.h"

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpc/grpc.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "rpc/address.h"
#include "rpc/serving_policy.h"
#include "rpc/token_auth.h"
#include "spdlog/spdlog.h"

namespace tessera::rpc {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerConfig& config) {
  const TransportSecurity& s = config.security;
  absl::StatusOr<ServingTransport> transport =
      ChooseServingTransport(config.name, config.address, s);
  if (!transport.ok()) return transport.status();
  std::shared_ptr<grpc::ServerCredentials> credentials;
  switch (*transport) {
    case ServingTransport::kTls: {
      grpc::SslServerCredentialsOptions options(
          s.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
      options.pem_root_certs = s.ca_pem;
      options.pem_key_cert_pairs.push_back({s.key_pem, s.cert_pem});
      credentials = grpc::SslServerCredentials(options);
      break;
    }
    case ServingTransport::kLoopback:
      credentials = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
      break;
    case ServingTransport::kUnixSocket:
      credentials = grpc::experimental::LocalServerCredentials(UDS);
      break;
    case ServingTransport::kPlaintext:
      return grpc::InsecureServerCredentials();  // no token checks: it would cross in clear
  }
  if (!s.token.empty()) credentials->SetAuthMetadataProcessor(TokenAuthProcessor(s.token));
  return credentials;
}

}  // namespace

void SetUpGrpcForDaemon() {
  static std::once_flag once;
  std::call_once(once, [] {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    grpc_init();  // never shut down: the process exit ends it
  });
}

absl::StatusOr<RunningServer> StartServer(const ServerConfig& config) {
  const std::string host = HostOf(config.address);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(config);
  if (!credentials.ok()) return credentials.status();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(config.limits.max_receive);
  builder.SetMaxSendMessageSize(config.limits.max_send);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Accept the clients' pings (every kKeepaliveTimeMs) without calling them abusive.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  grpc::ResourceQuota quota(config.name);
  quota.Resize(config.memory_quota_bytes);
  quota.SetMaxThreads(config.max_threads);
  builder.SetResourceQuota(quota);
  RunningServer running;
  builder.AddListeningPort(config.address, *std::move(credentials), &running.port);
  for (grpc::Service* service : config.services) builder.RegisterService(service);
  if (config.generic_service != nullptr)
    builder.RegisterCallbackGenericService(config.generic_service);
  running.server = builder.BuildAndStart();
  if (running.server == nullptr || running.port == 0) {
    return absl::UnavailableError(absl::StrCat(config.name, ": cannot listen on ", config.address));
  }
  if (IsUnixSocketAddress(config.address)) {  // gRPC reports port 1 for a bound socket
    running.port = 0;
    running.address = running.listening = config.address;
    return running;
  }
  const bool wildcard = host.empty() || host == "0.0.0.0" || host == "::";
  running.address = BoundAddress(wildcard ? "127.0.0.1" : host, running.port);
  running.listening = BoundAddress(host, running.port);
  return running;
}

}  // namespace tessera::rpc

#include "rpc/metrics_server.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "rpc/address.h"
#include "rpc/serving_policy.h"
#include "rpc/token_auth.h"
#include "spdlog/spdlog.h"

namespace tessera::rpc {
namespace {

// The socket address to bind for `address`: a wildcard for an empty host.
absl::StatusOr<sockaddr_storage> BindAddress(const MetricsServerConfig& config) {
  if (IsUnixSocketAddress(config.address)) {
    return absl::InvalidArgumentError(absl::StrCat(config.name, ": metrics address '",
                                                   config.address,
                                                   "': the endpoint serves host:port only"));
  }
  const size_t colon = config.address.rfind(':');
  if (colon == std::string::npos || colon + 1 == config.address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.name, ": address '", config.address, "' has no port"));
  }
  const std::string host = HostOf(config.address);
  const std::string port = config.address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int error =
          getaddrinfo(host.empty() ? "0.0.0.0" : host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.name, ": address '", config.address, "': ", gai_strerror(error)));
  }
  sockaddr_storage bound{};
  std::memcpy(&bound, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  return bound;
}

void LogFromLibrary(void* name, const char* format, va_list args) {
  char message[512];
  std::vsnprintf(message, sizeof(message), format, args);
  spdlog::warn("{}: {}", *static_cast<const std::string*>(name),
               std::string(absl::StripTrailingAsciiWhitespace(message)));
}

MHD_Result Answer(MHD_Connection* connection, unsigned code, const std::string& body,
                  const char* header = nullptr, const char* value = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          code == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8"
                                              : "text/plain; charset=utf-8");
  if (header != nullptr) MHD_add_response_header(response, header, value);
  const MHD_Result queued = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(MetricsServerConfig config) {
  absl::StatusOr<ServingTransport> transport =
      ChooseServingTransport(config.name, config.address, config.security);
  if (!transport.ok()) return transport.status();
  absl::StatusOr<sockaddr_storage> bind_address = BindAddress(config);
  if (!bind_address.ok()) return bind_address.status();

  std::unique_ptr<MetricsServer> server(new MetricsServer(std::move(config)));
  const MetricsServerConfig& c = server->config_;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (bind_address->ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  if (*transport == ServingTransport::kTls) flags |= MHD_USE_TLS;
  // Options that do not apply (TLS ones without MHD_USE_TLS) end the list early.
  const bool tls = *transport == ServingTransport::kTls;
  const bool mtls = tls && c.security.require_client_cert;
  server->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, reinterpret_cast<MHD_AccessHandlerCallback>(&Handle),
      server.get(), MHD_OPTION_EXTERNAL_LOGGER, &LogFromLibrary, const_cast<std::string*>(&c.name),
      MHD_OPTION_SOCK_ADDR, &*bind_address, MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(64),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(10),
      tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, c.security.key_pem.c_str(),
      MHD_OPTION_HTTPS_MEM_CERT, c.security.cert_pem.c_str(),
      mtls ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, c.security.ca_pem.c_str(),
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(c.name, ": cannot serve ", c.address,
                     " (in use, not an address of this host, or unusable TLS files)"));
  }
  const MHD_DaemonInfo* port = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = port == nullptr ? 0 : port->port;
  server->listening_ = BoundAddress(HostOf(c.address), server->port_);
  return server;
}

MetricsServer::~MetricsServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

std::string MetricsServer::Refusal(MHD_Connection* connection) const {
  if (config_.security.require_client_cert) {
    // libmicrohttpd asks for a client certificate but lets a client without one through.
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    unsigned verdict = 0;
    if (info == nullptr ||
        gnutls_certificate_verify_peers2(static_cast<gnutls_session_t>(info->tls_session),
                                         &verdict) != GNUTLS_E_SUCCESS ||
        verdict != 0) {
      return "this endpoint needs a client certificate signed by the cluster's CA\n";
    }
  }
  const std::string& token = config_.security.token;
  if (token.empty()) return "";
  const char* header =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  absl::string_view presented = header == nullptr ? "" : header;
  if (absl::ConsumePrefix(&presented, "Bearer ") && TokensEqual(presented, token)) return "";
  return "this endpoint needs the cluster token: Authorization: Bearer <token>\n";
}

int MetricsServer::Handle(void* self, MHD_Connection* connection, const char* url,
                          const char* method, const char* /*version*/, const char* /*upload_data*/,
                          size_t* upload_data_size, void** /*request_state*/) {
  const MetricsServer& server = *static_cast<const MetricsServer*>(self);
  if (*upload_data_size != 0) {  // a body we do not read: drop it
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (absl::string_view(url) != "/metrics") {
    return Answer(connection, MHD_HTTP_NOT_FOUND, "metrics are at /metrics\n");
  }
  if (absl::string_view(method) != MHD_HTTP_METHOD_GET) {
    return Answer(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", MHD_HTTP_HEADER_ALLOW,
                  MHD_HTTP_METHOD_GET);
  }
  if (const std::string refusal = server.Refusal(connection); !refusal.empty()) {
    return Answer(connection, MHD_HTTP_UNAUTHORIZED, refusal, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                  "Bearer realm=\"tessera\"");
  }
  std::vector<prometheus::MetricFamily> families;
  for (const prometheus::Collectable* collectable : server.config_.collectables) {
    std::vector<prometheus::MetricFamily> collected = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(collected.begin()),
                    std::make_move_iterator(collected.end()));
  }
  return Answer(connection, MHD_HTTP_OK, prometheus::TextSerializer().Serialize(families));
}

}  // namespace tessera::rpc

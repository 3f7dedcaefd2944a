// A daemon's Prometheus endpoint: GET /metrics answers the registered collectables in the
// text exposition format, over HTTP from GNU libmicrohttpd (its TLS is GnuTLS; civetweb,
// which prometheus-cpp's own exposer embeds, cannot use Debian 12's OpenSSL 3 for TLS),
// secured like the daemon's gRPC port (rpc/serving_policy.h):
//
//   - with TLS settings it serves HTTPS with the process's certificate (requiring a client
//     certificate under mutual TLS);
//   - with a cluster token every scrape must carry "Authorization: Bearer <token>"
//     (Prometheus: `authorization: {credentials_file: ...}`); a missing or wrong one is 401;
//   - a non-loopback address needs both, unless `insecure`.
#ifndef TESSERA_RPC_METRICS_SERVER_H_
#define TESSERA_RPC_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "rpc/transport_security.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace tessera::rpc {

struct MetricsServerConfig {
  std::string name;     // for messages: "tessera-worker metrics"
  std::string address;  // host:port; port 0 picks a free one
  TransportSecurity security;
  std::vector<const prometheus::Collectable*> collectables;  // not owned; outlive the server
};

class MetricsServer {
 public:
  // Errors: PERMISSION_DENIED for an unsafe configuration, INVALID_ARGUMENT for an address
  // without a port or with a host that does not resolve, UNAVAILABLE when binding fails; all
  // name the server and the address.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(MetricsServerConfig config);
  ~MetricsServer();  // stops serving; scrapes in flight finish first

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // The address as bound, with the port picked ("0.0.0.0:9100"), and its scheme.
  const std::string& listening() const { return listening_; }
  bool tls() const { return config_.security.tls(); }

 private:
  explicit MetricsServer(MetricsServerConfig config) : config_(std::move(config)) {}
  // libmicrohttpd's access handler: every request on any path.
  static int Handle(void* self, MHD_Connection* connection, const char* url, const char* method,
                    const char* version, const char* upload_data, size_t* upload_data_size,
                    void** request_state);
  // Why the request may not have the metrics (a 401 or 403 message); empty when it may.
  std::string Refusal(MHD_Connection* connection) const;

  const MetricsServerConfig config_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  std::string listening_;
};

}  // namespace tessera::rpc

#endif  // TESSERA_RPC_METRICS_SERVER_H_

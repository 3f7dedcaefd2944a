#include "rpc/metrics_flags.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus metrics at http(s)://HOST:PORT/metrics (empty: none); beyond "
          "loopback only with --tls_dir and --token_file, like --address");

namespace tessera::rpc {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServerFromFlags(
    const std::string& daemon, const TransportSecurity& security,
    std::vector<const prometheus::Collectable*> collectables) {
  const std::string address = absl::GetFlag(FLAGS_metrics_address);
  if (address.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start({.name = absl::StrCat(daemon, " metrics"),
                            .address = address,
                            .security = security,
                            .collectables = std::move(collectables)});
  if (!server.ok()) return server.status();
  spdlog::info("{} serving metrics at {}://{}/metrics{}", daemon,
               (*server)->tls() ? "https" : "http", (*server)->listening(),
               security.token.empty() ? "" : " (cluster token required)");
  return server;
}

}  // namespace tessera::rpc

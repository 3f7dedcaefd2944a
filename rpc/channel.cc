#include "rpc/channel.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "rpc/address.h"
#include "rpc/server.h"
#include "rpc/token_auth.h"

namespace tessera::rpc {

absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(const ChannelConfig& config) {
  const TransportSecurity& s = config.security;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The level of protection the token asks of the connection that carries it.
  std::optional<grpc_security_level> token_level;
  if (IsUnixSocketAddress(config.target)) {  // as the server: TLS adds nothing there
    credentials = grpc::experimental::LocalCredentials(UDS);
    token_level = GRPC_SECURITY_NONE;
  } else if (s.tls()) {
    token_level = GRPC_PRIVACY_AND_INTEGRITY;
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = s.ca_pem;
    options.pem_private_key = s.key_pem;
    options.pem_cert_chain = s.cert_pem;
    credentials = grpc::SslCredentials(options);
  } else if (IsLoopbackHost(HostOf(config.target))) {
    credentials = grpc::experimental::LocalCredentials(LOCAL_TCP);
    token_level = GRPC_SECURITY_NONE;
  } else if (s.insecure) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    return absl::PermissionDeniedError(absl::StrCat(
        "will not dial ", config.target,
        " in plaintext: it is beyond this machine; give --tls_dir (a folder from `tessera certs`) "
        "and --token_file, or --insecure"));
  }
  // In plaintext beyond loopback (--insecure) the token stays home: it would be in the clear.
  if (!s.token.empty() && token_level.has_value()) {
    credentials =
        grpc::CompositeChannelCredentials(credentials, TokenCallCredentials(s.token, *token_level));
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(config.limits.max_receive);
  args.SetMaxSendMessageSize(config.limits.max_send);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (config.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(config.target, credentials, args);
}

namespace {

// Why `channel`'s last connection attempt failed: gRPC hands it to the next call that fails
// fast. A health check asks (no token needed, every server has the service).
std::string LastConnectError(grpc::Channel& channel) {
  grpc::GenericStub stub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  grpc::Slice empty_message(std::string{});  // HealthCheckRequest{} encodes as no bytes
  grpc::ByteBuffer request(&empty_message, 1);
  grpc::ByteBuffer reply;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<grpc::Status> probe;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply,
                 [&](grpc::Status status) {
                   std::lock_guard<std::mutex> lock(mu);
                   probe = std::move(status);
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return probe.has_value(); });
  return probe->ok() ? "" : probe->error_message();
}

}  // namespace

absl::Status WaitUntilConnected(grpc::Channel& channel, const std::string& peer,
                                absl::Duration timeout, const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + timeout;
  int closed_in_a_row = 0;
  std::string why;
  while (true) {
    if (channel.WaitForConnected(
            absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1))))) {
      return absl::OkStatus();
    }
    if (cancelled && cancelled())
      return absl::CancelledError(absl::StrCat("cancelled while connecting to ", peer));
    why = LastConnectError(channel);
    // A peer that is not up yet refuses connections; one whose TLS settings differ from
    // ours fails every handshake, or closes every connection when one end speaks plaintext.
    // Waiting mends the first only.
    if (absl::StrContains(why, "andshake") || absl::StrContains(why, "certificate")) {
      return absl::UnavailableError(absl::StrCat(peer, ": TLS handshake failed (", why, ")"));
    }
    closed_in_a_row = absl::StrContains(why, "Socket closed") ? closed_in_a_row + 1 : 0;
    if (closed_in_a_row >= 3) {
      return absl::UnavailableError(absl::StrCat(
          peer,
          ": closes every connection as it is set up - does one end use TLS (--tls_dir) and "
          "the other not? (",
          why, ")"));
    }
    if (absl::Now() >= deadline) break;
  }
  return absl::UnavailableError(absl::StrCat(peer, ": not reachable within ",
                                             absl::FormatDuration(timeout),
                                             why.empty() ? "" : absl::StrCat(" (", why, ")")));
}

}  // namespace tessera::rpc

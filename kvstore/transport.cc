#include "kvstore/transport.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tessera::kvstore {

grpc::ChannelArguments KVStoreChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Each worker gets its own TCP connection per server, even inside one process (tests):
  // a shared subchannel would make one worker's stall everybody's.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

void ConfigureKVStoreServer(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Accept the workers' pings (every kKeepaliveTimeMs) without calling them abusive.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

ServerMessage OkReply(uint64_t id) {
  ServerMessage reply;
  reply.set_id(id);
  return reply;
}

ServerMessage ErrorReply(uint64_t id, const absl::Status& status) {
  ServerMessage reply = OkReply(id);
  reply.set_code(static_cast<int>(status.code()));
  reply.set_message(std::string(status.message()));
  return reply;
}

absl::Status ReplyStatus(const ServerMessage& reply) {
  return absl::Status(static_cast<absl::StatusCode>(reply.code()), reply.message());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, std::string_view context) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(absl::string_view(context.data(), context.size()), ": ", status.error_message()));
}

}  // namespace tessera::kvstore

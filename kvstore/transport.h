// What both ends of the KVStore streams agree on: the protocol version, the chunk size, the
// message encoding, and the status conversions.
//
// Message sizes are bounded on purpose: arrays travel in chunks of kChunkBytes, so every
// message stays well under kMaxMessageBytes, which both sides enforce (a larger message is
// RESOURCE_EXHAUSTED and ends its stream). Keepalive pings (rpc/server.h) run in both
// directions, so a peer that hangs or vanishes without closing its socket is noticed within
// 15 s, and a dist_sync round waiting on it fails instead of hanging.
#ifndef TESSERA_KVSTORE_TRANSPORT_H_
#define TESSERA_KVSTORE_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/kvstore.pb.h"
#include "rpc/message_limits.h"

namespace tessera::kvstore {

inline constexpr uint32_t kKVStoreProtocolVersion = 1;
inline constexpr uint64_t kChunkBytes = uint64_t{1} << 20;
inline constexpr int kMaxMessageBytes = rpc::kKVStoreLimits.max_receive;

// A reply carrying no body, or `status` (an absl code and message), to request `id`.
ServerMessage OkReply(uint64_t id);
ServerMessage ErrorReply(uint64_t id, const absl::Status& status);
// Whether `reply` is its request's last: an error, a reply that is no pull, or a pull's last
// chunk.
bool IsFinalReply(const ServerMessage& reply);
absl::Status ReplyStatus(const ServerMessage& reply);

// The streams carry grpc::ByteBuffers encoded here, so array payloads are never copied into
// a protobuf: the chunk's other fields are serialized as usual and its data joins the
// buffer as a slice - the message's own data string moved out (EncodeWorkerMessage,
// EncodeServerMessage), or memory the caller lends (EncodeWorkerChunk: `owner` keeps it
// alive until gRPC lets go of it; its contents must not change until the request's reply).
// The bytes on the wire are exactly the protobuf encoding of the message.
grpc::ByteBuffer EncodeWorkerMessage(WorkerMessage message);
grpc::ByteBuffer EncodeWorkerChunk(WorkerMessage message, const char* data, size_t size,
                                   std::shared_ptr<const void> owner);
grpc::ByteBuffer EncodeServerMessage(ServerMessage message);
// A Replicate message (its value without data) with [data, data + size) as the value's data,
// lent as EncodeWorkerChunk's is.
grpc::ByteBuffer EncodeReplicaChunk(ReplicaMessage message, const char* data, size_t size,
                                    std::shared_ptr<const void> owner);
// Consumes `buffer`; INVALID_ARGUMENT when it is not a WorkerMessage.
absl::Status DecodeWorkerMessage(grpc::ByteBuffer* buffer, WorkerMessage* message);

grpc::Status ToGrpcStatus(const absl::Status& status);
// `context` (e.g. "server 127.0.0.1:4000") prefixes the message.
absl::Status FromGrpcStatus(const grpc::Status& status, std::string_view context);

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_TRANSPORT_H_

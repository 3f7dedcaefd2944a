#include "kvstore/transport.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace tessera::kvstore {

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

namespace {

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutLengthTag(std::string& out, int field, uint64_t length) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | 2);  // wire type 2: length-delimited
  PutVarint(out, length);
}

// `message` (without its chunk field number `field`) followed by that chunk with
// `payload` as its data: the message's own fields, then the chunk field, encoded by hand so
// the payload joins the buffer as a slice instead of being copied into it. Protobuf parsers
// accept fields in any order, so the result parses as the whole message.
template <typename Message>
grpc::ByteBuffer WithPayload(Message& message, const ArrayChunk& chunk, int field, grpc::Slice payload) {
  std::string head = chunk.SerializeAsString();
  std::string data_tag;
  PutLengthTag(data_tag, /*ArrayChunk.data=*/5, payload.size());
  std::string prefix = message.SerializeAsString();
  PutLengthTag(prefix, field, head.size() + data_tag.size() + payload.size());
  prefix += head;
  prefix += data_tag;
  grpc::Slice slices[2] = {grpc::Slice(prefix), std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::Slice MoveIntoSlice(std::string* data) {
  auto* owned = new std::string(std::move(*data));
  data->clear();
  return grpc::Slice(owned->data(), owned->size(), [](void* p) { delete static_cast<std::string*>(p); },
                     owned);
}

// [data, data + size) as a slice that keeps `owner` until gRPC lets go of it.
grpc::Slice LentSlice(const char* data, size_t size, std::shared_ptr<const void> owner) {
  auto* hold = new std::shared_ptr<const void>(std::move(owner));
  return grpc::Slice(const_cast<char*>(data), size,
                     [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, hold);
}

// The field number of a WorkerMessage's array chunk (init, push, push_pull or stash), 0 for
// none.
int ChunkField(const WorkerMessage& message) {
  switch (message.body_case()) {
    case WorkerMessage::kInit:
      return WorkerMessage::kInitFieldNumber;
    case WorkerMessage::kPush:
      return WorkerMessage::kPushFieldNumber;
    case WorkerMessage::kPushPull:
      return WorkerMessage::kPushPullFieldNumber;
    case WorkerMessage::kStash:
      return WorkerMessage::kStashFieldNumber;
    default:
      return 0;
  }
}

// The array chunk of a message whose ChunkField is not 0.
ArrayChunk* MutableChunk(WorkerMessage& message) {
  switch (message.body_case()) {
    case WorkerMessage::kInit:
      return message.mutable_init();
    case WorkerMessage::kPush:
      return message.mutable_push();
    case WorkerMessage::kStash:
      return message.mutable_stash();
    default:
      return message.mutable_push_pull();
  }
}

template <typename Message>
grpc::ByteBuffer Plain(const Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

grpc::ByteBuffer EncodeWorkerMessage(WorkerMessage message) {
  if (const int field = ChunkField(message); field != 0) {
    ArrayChunk chunk = std::move(*MutableChunk(message));
    grpc::Slice payload = MoveIntoSlice(chunk.mutable_data());
    message.clear_body();
    return WithPayload(message, chunk, field, std::move(payload));
  }
  return Plain(message);
}

bool IsFinalReply(const ServerMessage& reply) {
  return reply.code() != 0 || !reply.has_pull() || reply.pull().last();
}

grpc::ByteBuffer EncodeWorkerChunk(WorkerMessage message, const char* data, size_t size,
                                   std::shared_ptr<const void> owner) {
  const int field = ChunkField(message);
  const ArrayChunk chunk = *MutableChunk(message);
  message.clear_body();
  return WithPayload(message, chunk, field, LentSlice(data, size, std::move(owner)));
}

grpc::ByteBuffer EncodeReplicaChunk(ReplicaMessage message, const char* data, size_t size,
                                    std::shared_ptr<const void> owner) {
  if (!message.has_value()) return Plain(message);
  const ArrayChunk chunk = message.value();
  message.clear_value();
  return WithPayload(message, chunk, ReplicaMessage::kValueFieldNumber,
                     LentSlice(data, size, std::move(owner)));
}

grpc::ByteBuffer EncodeServerMessage(ServerMessage message) {
  if (message.has_pull()) {
    ArrayChunk chunk = std::move(*message.mutable_pull());
    grpc::Slice payload = MoveIntoSlice(chunk.mutable_data());
    message.clear_body();
    return WithPayload(message, chunk, ServerMessage::kPullFieldNumber, std::move(payload));
  }
  return Plain(message);
}

absl::Status DecodeWorkerMessage(grpc::ByteBuffer* buffer, WorkerMessage* message) {
  const grpc::Status status = grpc::SerializationTraits<WorkerMessage>::Deserialize(buffer, message);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a message that is not a WorkerMessage: ", status.error_message()));
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

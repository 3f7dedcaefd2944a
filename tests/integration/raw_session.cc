#include "tests/integration/raw_session.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvstore/transport.h"
#include "rpc/channel.h"

namespace tessera::integration {

std::shared_ptr<grpc::Channel> RawChannel(const std::string& address, int max_send_bytes) {
  rpc::MessageLimits limits = rpc::kKVStoreLimits.Peer();
  limits.max_send = max_send_bytes;
  return rpc::NewChannel({.target = address, .limits = limits, .own_connection = true}).value();
}

ArrayChunk WholeChunk(int key, DataType dtype, const std::vector<int64_t>& shape,
                      const std::string& bytes) {
  ArrayChunk chunk;
  chunk.set_key(key);
  chunk.set_dtype(dtype);
  for (int64_t d : shape) chunk.add_shape(d);
  chunk.set_offset(0);
  chunk.set_data(bytes);
  chunk.set_last(true);
  return chunk;
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

RawSession::RawSession(KVStoreService::Stub* stub) {
  context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  stream_ = stub->Session(&context_);
}

RawSession::~RawSession() {
  if (!finished_) {
    context_.TryCancel();
    (void)stream_->Finish();
  }
}

bool RawSession::Write(const WorkerMessage& message) { return stream_->Write(message); }

bool RawSession::Read(ServerMessage* reply) { return stream_->Read(reply); }

absl::Status RawSession::Call(WorkerMessage message, std::vector<ServerMessage>* replies) {
  if (message.id() == 0) message.set_id(next_id_++);
  const uint64_t id = message.id();
  if (!stream_->Write(message)) return absl::UnavailableError("the stream is closed for writing");
  absl::Status first_error;
  ServerMessage reply;
  while (stream_->Read(&reply)) {
    if (reply.id() != id) {
      return absl::InternalError(
          absl::StrCat("reply to request ", reply.id(), " while ", id, " is the only one open"));
    }
    if (first_error.ok()) first_error = kvstore::ReplyStatus(reply);
    if (replies != nullptr) replies->push_back(reply);
    if (kvstore::IsFinalReply(reply)) return first_error;
  }
  return absl::UnavailableError(absl::StrCat("the stream ended before request ", id, "'s reply"));
}

absl::Status RawSession::Hello(int rank, int num_workers, SyncMode mode) {
  WorkerMessage m;
  m.mutable_hello()->set_protocol_version(kvstore::kKVStoreProtocolVersion);
  m.mutable_hello()->set_rank(rank);
  m.mutable_hello()->set_num_workers(num_workers);
  m.mutable_hello()->set_mode(mode);
  return Call(std::move(m));
}

absl::Status RawSession::Init(const ArrayChunk& chunk) {
  WorkerMessage m;
  *m.mutable_init() = chunk;
  return Call(std::move(m));
}

absl::Status RawSession::Push(const ArrayChunk& chunk) {
  WorkerMessage m;
  *m.mutable_push() = chunk;
  return Call(std::move(m));
}

absl::StatusOr<std::vector<float>> RawSession::Pull(int key) {
  WorkerMessage m;
  m.mutable_pull()->set_key(key);
  std::vector<ServerMessage> replies;
  if (absl::Status status = Call(std::move(m), &replies); !status.ok()) return status;
  std::string bytes;
  for (const ServerMessage& r : replies) bytes += r.pull().data();
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

grpc::Status RawSession::Finish() {
  finished_ = true;
  stream_->WritesDone();
  return stream_->Finish();
}

}  // namespace tessera::integration

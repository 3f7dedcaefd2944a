// RawSession: one KVStore Session stream (proto/kvstore.proto) driven by hand through the
// generated synchronous stub, one request at a time - what a buggy or hostile worker could
// send, which the real client (kvstore/internal/server_connection.h) never does.
//
// Every call has a deadline (the whole stream lives at most 20 s), so a server that never
// answers fails the test instead of hanging it. Thread safety: one thread per session.
#ifndef TESSERA_TESTS_INTEGRATION_RAW_SESSION_H_
#define TESSERA_TESTS_INTEGRATION_RAW_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/kvstore.grpc.pb.h"

namespace tessera::integration {

// A loopback channel with the workers' settings (rpc/channel.h), except that it sends messages
// up to `max_send_bytes`: above kMaxMessageBytes a test can reach the server's own limit.
std::shared_ptr<grpc::Channel> RawChannel(const std::string& address, int max_send_bytes);

// One array chunk carrying a whole part (offset 0, last).
ArrayChunk WholeChunk(int key, DataType dtype, const std::vector<int64_t>& shape,
                      const std::string& bytes);
std::string FloatBytes(const std::vector<float>& values);

class RawSession {
 public:
  explicit RawSession(KVStoreService::Stub* stub);
  ~RawSession();  // cancels the stream if Finish was not called

  // Sends `message` (with the next id unless it has one) and reads until its final reply;
  // returns the first error reply's status, or OK. UNAVAILABLE if the stream ended first,
  // INTERNAL if a reply to another request comes instead.
  absl::Status Call(WorkerMessage message, std::vector<ServerMessage>* replies = nullptr);
  absl::Status Hello(int rank, int num_workers, SyncMode mode);
  absl::Status Init(const ArrayChunk& chunk);
  absl::Status Push(const ArrayChunk& chunk);
  absl::StatusOr<std::vector<float>> Pull(int key);

  // Writes `message` without waiting for a reply (false: the stream is broken).
  bool Write(const WorkerMessage& message);
  // Reads the next reply, whichever request it answers (false: the stream ended).
  bool Read(ServerMessage* reply);
  // Closes this side and returns how the server ended the stream.
  grpc::Status Finish();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<WorkerMessage, ServerMessage>> stream_;
  uint64_t next_id_ = 1;
  bool finished_ = false;
};

}  // namespace tessera::integration

#endif  // TESSERA_TESTS_INTEGRATION_RAW_SESSION_H_

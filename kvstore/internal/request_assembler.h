// RequestAssembler: a worker's chunked array requests (Init, Push, PushPull: the ArrayChunks
// of one request id, in order) made whole again, and what does not add up refused: an unknown
// dtype, a bad or oversized shape, a chunk that does not continue its request, more bytes at
// once than the worker may hold. No locks: each worker session owns one and calls it from one
// thread at a time. Its refusals are the messages the worker gets.
#ifndef TESSERA_KVSTORE_INTERNAL_REQUEST_ASSEMBLER_H_
#define TESSERA_KVSTORE_INTERNAL_REQUEST_ASSEMBLER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

// "float32 (2,3)": a chunk's dtype and shape, as refusals name them.
std::string ShapeString(DataType dtype, const google::protobuf::RepeatedField<int64_t>& dims);

class RequestAssembler {
 public:
  struct Limits {
    int server_index = 0;            // named in refusals
    uint64_t max_array_bytes = 0;    // one request's array
    int max_requests = 0;            // requests being received at once
    uint64_t max_bytes = 0;          // their bytes, with what the worker holds elsewhere
  };
  // A whole request.
  struct Request {
    ArrayChunk header;               // the first chunk, without its data
    std::vector<std::string> pieces; // the chunks' payloads, in order
    uint64_t received = 0;
    uint64_t expected = 0;
  };

  explicit RequestAssembler(Limits limits) : limits_(limits) {}

  // Checks `chunk` of request `id` and appends it (its payload moved out); returns the
  // request on its last chunk, nullopt while more are due, or the refusal. A refused request
  // is forgotten, and its later chunks are dropped (nullopt) up to its last one.
  // `held_elsewhere`: the worker's bytes held outside this assembler (parked pushes).
  absl::StatusOr<std::optional<Request>> Add(uint64_t id, ArrayChunk& chunk,
                                             uint64_t held_elsewhere);

  // Bytes received so far by the requests not yet whole.
  uint64_t bytes() const { return bytes_; }

 private:
  const Limits limits_;
  std::map<uint64_t, Request> open_;
  uint64_t bytes_ = 0;
  std::map<uint64_t, bool> refused_;  // ids whose remaining chunks are dropped
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_REQUEST_ASSEMBLER_H_

#include "kvstore/internal/request_assembler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera::kvstore {

std::string ShapeString(DataType dtype, const google::protobuf::RepeatedField<int64_t>& dims) {
  return absl::StrCat(DTypeName(static_cast<DType>(dtype)), " ",
                      Shape(dims.begin(), dims.end()).ToString());
}

absl::StatusOr<std::optional<RequestAssembler::Request>> RequestAssembler::Add(
    uint64_t id, ArrayChunk& chunk, uint64_t held_elsewhere) {
  using Result = std::optional<Request>;
  if (auto f = refused_.find(id); f != refused_.end()) {
    if (chunk.last()) refused_.erase(f);  // the failed request's remaining chunks are dropped
    return Result();
  }
  auto fail = [&](absl::Status status) {
    if (auto open = open_.find(id); open != open_.end()) {
      bytes_ -= open->second.received;
      open_.erase(open);
    }
    if (!chunk.last()) refused_[id] = true;
    return status;
  };
  auto it = open_.find(id);
  if (it == open_.end()) {
    if (open_.size() >= static_cast<size_t>(limits_.max_requests)) {
      return fail(absl::ResourceExhaustedError(absl::StrCat(
          "key ", chunk.key(), ": request ", id, " would be this worker's request number ",
          open_.size() + 1, " being received at once; server ", limits_.server_index,
          " takes at most ", limits_.max_requests)));
    }
    if (chunk.offset() != 0) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "key ", chunk.key(), ": the first chunk of request ", id, " starts at byte ",
          chunk.offset(), ", not 0")));
    }
    if (!DataType_IsValid(chunk.dtype())) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("key ", chunk.key(), ": unknown dtype ", chunk.dtype())));
    }
    // The part's size, guarding against overflow and absurd shapes.
    uint64_t bytes = DTypeSize(static_cast<DType>(chunk.dtype()));
    const uint64_t limit = limits_.max_array_bytes;
    if (chunk.shape().empty()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("key ", chunk.key(), ": no shape")));
    }
    for (int64_t d : chunk.shape()) {
      if (d < 1 || bytes > limit / static_cast<uint64_t>(d)) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "key ", chunk.key(), ": shape ", ShapeString(chunk.dtype(), chunk.shape()),
            " has a dimension < 1 or exceeds the server's ", limit, "-byte array bound")));
      }
      bytes *= static_cast<uint64_t>(d);
    }
    Request request;
    request.header = chunk;
    request.header.clear_data();
    request.expected = bytes;
    it = open_.emplace(id, std::move(request)).first;
  } else {
    const ArrayChunk& h = it->second.header;
    if (h.key() != chunk.key() || h.dtype() != chunk.dtype() || h.compressed() != chunk.compressed() ||
        !std::equal(h.shape().begin(), h.shape().end(), chunk.shape().begin(),
                    chunk.shape().end()) ||
        chunk.offset() != it->second.received) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "request ", id, ": a chunk for key ", chunk.key(), " ",
          ShapeString(chunk.dtype(), chunk.shape()), " at byte ", chunk.offset(),
          " does not continue key ", h.key(), " ", ShapeString(h.dtype(), h.shape()),
          " received up to byte ", it->second.received)));
    }
  }
  Request& request = it->second;
  if (chunk.data().size() > request.expected - request.received) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "key ", chunk.key(), ": chunk at byte ", chunk.offset(), " with ", chunk.data().size(),
        " bytes overruns the array ", ShapeString(chunk.dtype(), chunk.shape()), " of ",
        request.expected, " bytes")));
  }
  const uint64_t held = bytes_ + held_elsewhere + chunk.data().size();
  if (held > limits_.max_bytes) {
    return fail(absl::ResourceExhaustedError(absl::StrCat(
        "key ", chunk.key(), ": request ", id,
        " would take this worker's requests being received or parked to ", held, " bytes; server ",
        limits_.server_index, " holds at most ", limits_.max_bytes, " per worker")));
  }
  request.received += chunk.data().size();
  bytes_ += chunk.data().size();
  if (!chunk.data().empty()) request.pieces.push_back(std::move(*chunk.mutable_data()));
  if (!chunk.last()) return Result();
  // A compressed push carries fewer bytes than its values take, as many as its compression
  // says (the store checks that: compression.h); never more.
  if (request.received != request.expected && !request.header.compressed()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "key ", chunk.key(), ": the last chunk ends at byte ", request.received, " of the ",
        request.expected, " that ", ShapeString(chunk.dtype(), chunk.shape()), " needs")));
  }
  Request done = std::move(request);
  bytes_ -= done.received;
  open_.erase(it);
  return Result(std::move(done));
}

}  // namespace tessera::kvstore

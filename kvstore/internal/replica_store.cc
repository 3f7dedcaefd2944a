#include "kvstore/internal/replica_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/shape.h"

namespace tessera::kvstore {

std::vector<ReplicaMessage> SplitReplicaUpdate(ReplicaMessage update, uint64_t id,
                                               uint64_t max_chunk_bytes) {
  const std::string data = std::move(*update.mutable_value()->mutable_data());
  const std::string slot = std::move(*update.mutable_optimizer_slot());
  update.mutable_value()->clear_data();
  update.clear_optimizer_slot();
  update.set_id(id);
  // Message i carries bytes [i * max, (i + 1) * max) of the value and of the slot (either
  // may have run out), so no message exceeds twice the chunk.
  const uint64_t longer = std::max(data.size(), slot.size());
  const uint64_t count = std::max<uint64_t>(1, (longer + max_chunk_bytes - 1) / max_chunk_bytes);
  auto piece = [&](const std::string& bytes, uint64_t i) {
    const uint64_t at = std::min<uint64_t>(i * max_chunk_bytes, bytes.size());
    return bytes.substr(at, std::min<uint64_t>(max_chunk_bytes, bytes.size() - at));
  };
  std::vector<ReplicaMessage> messages;
  for (uint64_t i = 0; i < count; ++i) {
    ReplicaMessage& m = messages.emplace_back();
    if (i + 1 == count) {
      m = std::move(update);  // the last message carries the rest of the update
    } else {
      m.set_id(id);
      *m.mutable_value() = update.value();
    }
    m.mutable_value()->set_offset(std::min<uint64_t>(i * max_chunk_bytes, data.size()));
    m.mutable_value()->set_data(piece(data, i));
    m.mutable_value()->set_last(i + 1 == count);
    m.set_optimizer_slot(piece(slot, i));
  }
  return messages;
}

ReplicaReceiver::ReplicaReceiver(int server_index, uint64_t max_array_bytes)
    : max_slot_bytes_(4 * max_array_bytes + 4096),  // a few states and their headers
      assembler_({.server_index = server_index,
                  .max_array_bytes = max_array_bytes,
                  .max_requests = 1,  // a primary sends one update's chunks together
                  .max_bytes = max_array_bytes}) {}

absl::StatusOr<std::optional<ReplicaMessage>> ReplicaReceiver::Add(ReplicaMessage message) {
  const uint64_t id = message.id();
  if (id != slot_id_) {
    slot_id_ = id;
    slot_.clear();
  }
  if (message.optimizer_slot().size() > max_slot_bytes_ - slot_.size()) {
    slot_.clear();
    slot_id_ = 0;
    return absl::InvalidArgumentError(absl::StrCat(
        "replica update ", id, " of ", message.value().key(),
        ": its optimizer slot exceeds the server's bound of ", max_slot_bytes_, " bytes"));
  }
  slot_ += message.optimizer_slot();
  absl::StatusOr<std::optional<RequestAssembler::Request>> whole =
      assembler_.Add(id, *message.mutable_value(), 0);
  if (!whole.ok()) {
    slot_.clear();
    return absl::Status(whole.status().code(),
                        absl::StrCat("replica update ", id, " of ", message.value().key(), ": ",
                                     whole.status().message()));
  }
  if (!whole->has_value()) return std::optional<ReplicaMessage>();
  RequestAssembler::Request& request = **whole;
  std::string data;
  data.reserve(request.received);
  for (const std::string& piece : request.pieces) data += piece;
  *message.mutable_value() = std::move(request.header);
  message.mutable_value()->set_data(std::move(data));
  message.set_optimizer_slot(std::move(slot_));
  slot_.clear();
  slot_id_ = 0;
  return std::optional<ReplicaMessage>(std::move(message));
}

ReplicaStore::ReplicaStore(int server_index, int num_servers)
    : server_index_(server_index), primary_((server_index + num_servers - 1) % num_servers) {}

const ReplicaStore::Part* ReplicaStore::Find(int key) const {
  auto it = parts_.find(key);
  return it == parts_.end() ? nullptr : &it->second;
}

absl::Status ReplicaStore::Apply(ReplicaMessage update) {
  const int key = update.value().key();
  const std::string what =
      absl::StrCat("replica of key ", key, " (version ", update.version(), ", job '",
                   update.job_id(), "') from server ", update.primary());
  if (update.primary() != primary_ || primary_ == server_index_) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": server ", server_index_, " backs up server ", primary_,
                     primary_ == server_index_ ? " (itself: there is no other server)" : ""));
  }
  if (update.view() < view_) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": view ", update.view(), " is older than view ", view_));
  }
  if (update.num_workers() < 1 ||
      (update.mode() != SYNC_MODE_SYNC && update.mode() != SYNC_MODE_ASYNC)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": needs a worker count (got ", update.num_workers(), ") and a mode"));
  }
  if (update.value().dtype() != DT_FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a replica is float32, got ",
                     ShapeString(update.value().dtype(), update.value().shape())));
  }
  if (update.taken_size() != update.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", update.taken_size(),
                                                   " push counts for ", update.num_workers(),
                                                   " workers"));
  }
  const bool another_job = !has_job_ || update.job_id() != job_id_;
  if (!another_job && (update.mode() != mode_ || update.num_workers() != num_workers_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the job's copy is ", SyncMode_Name(mode_), " with ", num_workers_,
        " workers, the update says ", SyncMode_Name(update.mode()), " with ",
        update.num_workers()));
  }
  if (another_job && update.version() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this server holds no copy of that job",
        has_job_ ? absl::StrCat(" (its copy is of job '", job_id_, "')") : "",
        "; a job's copy starts with an Init (version 0)"));
  }
  const Part* held = another_job ? nullptr : Find(key);
  std::vector<int64_t> shape(update.value().shape().begin(), update.value().shape().end());
  if (held == nullptr && update.version() != 0) {
    return absl::NotFoundError(
        absl::StrCat(what, ": no copy of the key (its Init, version 0, never came)"));
  }
  if (held != nullptr && held->shape != shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": value float32 ", Shape(shape.begin(), shape.end()).ToString(),
                     " but the copy is float32 ",
                     Shape(held->shape.begin(), held->shape.end()).ToString()));
  }
  if (held != nullptr && update.version() <= held->version) return absl::OkStatus();  // a resend
  if (held != nullptr && update.version() > held->version + 1) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the copy is at version ",
                                                      held->version, ", so version ",
                                                      held->version + 1, " was lost"));
  }
  const uint64_t bytes = static_cast<uint64_t>(Shape(shape.begin(), shape.end()).Size()) * 4;
  if (update.value().data().size() != bytes || update.value().offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", update.value().data().size(), " bytes at offset ", update.value().offset(),
        " for a value of ", bytes));
  }
  if (another_job) {
    parts_.clear();
    has_job_ = true;
    job_id_ = update.job_id();
    mode_ = update.mode();
    num_workers_ = update.num_workers();
  }
  view_ = update.view();
  Part& part = parts_[key];
  part.shape = std::move(shape);
  part.value = std::move(*update.mutable_value()->mutable_data());
  part.version = update.version();
  part.taken.assign(update.taken().begin(), update.taken().end());
  part.optimizer_slot = std::move(*update.mutable_optimizer_slot());
  return absl::OkStatus();
}

}  // namespace tessera::kvstore

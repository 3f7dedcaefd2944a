#include "kvstore/internal/replica_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "kvstore/cluster_spec.h"
#include "kvstore/internal/compression.h"
#include "kvstore/internal/optimizer_spec.h"
#include "kvstore/internal/sync_round.h"

namespace tessera::kvstore {

std::vector<ReplicaChunk> PlanReplicaChunks(ReplicaMessage update, uint64_t value_bytes,
                                            uint64_t id, uint64_t max_chunk_bytes) {
  update.set_id(id);
  if (!update.has_value()) return {{std::move(update), 0, 0}};  // an optimizer: one message
  const std::string slot = std::move(*update.mutable_optimizer_slot());
  update.clear_optimizer_slot();
  update.mutable_value()->clear_data();
  // Message i carries bytes [i * max, (i + 1) * max) of the value and of the slot (either
  // may have run out), so no message exceeds twice the chunk.
  const uint64_t longer = std::max<uint64_t>(value_bytes, slot.size());
  const uint64_t count = std::max<uint64_t>(1, (longer + max_chunk_bytes - 1) / max_chunk_bytes);
  std::vector<ReplicaChunk> chunks;
  for (uint64_t i = 0; i < count; ++i) {
    ReplicaChunk& c = chunks.emplace_back();
    if (i + 1 == count) {
      c.message = std::move(update);  // the last message carries the rest of the update
    } else {
      c.message.set_id(id);
      *c.message.mutable_value() = update.value();
    }
    c.offset = std::min<uint64_t>(i * max_chunk_bytes, value_bytes);
    c.size = std::min<uint64_t>(max_chunk_bytes, value_bytes - c.offset);
    c.message.mutable_value()->set_offset(c.offset);
    c.message.mutable_value()->set_last(i + 1 == count);
    const uint64_t at = std::min<uint64_t>(i * max_chunk_bytes, slot.size());
    c.message.set_optimizer_slot(slot.substr(at, std::min<uint64_t>(max_chunk_bytes, slot.size() - at)));
  }
  return chunks;
}

std::vector<ReplicaMessage> SplitReplicaUpdate(ReplicaMessage update, uint64_t id,
                                               uint64_t max_chunk_bytes) {
  // (mutable_value would give an optimizer message an empty value.)
  const std::string data =
      update.has_value() ? std::move(*update.mutable_value()->mutable_data()) : std::string();
  std::vector<ReplicaMessage> messages;
  for (ReplicaChunk& c : PlanReplicaChunks(std::move(update), data.size(), id, max_chunk_bytes)) {
    if (c.message.has_value()) c.message.mutable_value()->set_data(data.substr(c.offset, c.size));
    messages.push_back(std::move(c.message));
  }
  return messages;
}

ReplicaReceiver::ReplicaReceiver(int server_index, uint64_t max_array_bytes)
    : max_slot_bytes_(4 * max_array_bytes + 4096),  // a few states and their headers
      assembler_({.server_index = server_index,
                  .max_array_bytes = max_array_bytes,
                  .max_requests = 1,  // a primary sends one update's chunks together
                  .max_bytes = max_array_bytes}) {}

absl::StatusOr<std::optional<ReplicaReceiver::Whole>> ReplicaReceiver::Add(
    ReplicaMessage message) {
  const uint64_t id = message.id();
  if (!message.has_value()) return std::optional<Whole>(Whole{std::move(message), {}});
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
  if (!whole->has_value()) return std::optional<Whole>();
  RequestAssembler::Request& request = **whole;
  *message.mutable_value() = std::move(request.header);
  message.set_optimizer_slot(std::move(slot_));
  slot_.clear();
  slot_id_ = 0;
  return std::optional<Whole>(Whole{std::move(message), std::move(request.pieces)});
}

ReplicaStore::ReplicaStore(const Runtime& rt, int server_index, int num_servers, int index)
    : rt_(rt),
      server_index_(server_index),
      primary_(index >= 0 ? index : (server_index + num_servers - 1) % num_servers) {}

int ReplicaStore::IndexOf(const ReplicaMessage& update) {
  return update.has_index() ? update.index() : update.primary();
}

absl::StatusOr<ReplicaStore::Copy> ReplicaStore::Find(int key) const {
  auto it = parts_.find(key);
  if (it == parts_.end()) {
    return absl::NotFoundError(
        absl::StrCat("server ", server_index_, " holds no backup copy of key ", key));
  }
  const Part& part = it->second;
  Copy copy;
  copy.shape.assign(part.shape.dims().begin(), part.shape.dims().end());
  copy.value.resize(static_cast<size_t>(part.shape.Size()) * sizeof(float));
  RETURN_IF_ERROR(part.value.SyncCopyToCPU(copy.value.data(), part.shape.Size()));
  copy.version = part.version;
  copy.pushes = part.pushes;
  copy.taken = part.taken;
  if (optimizer_ != nullptr) {
    ASSIGN_OR_RETURN(copy.optimizer_slot, optimizer_->SaveSlot(key));
  }
  return copy;
}

absl::StatusOr<ReplicaStore::Handover> ReplicaStore::TakeOver(const std::string& job_id,
                                                                uint64_t view) {
  const std::string what =
      absl::StrCat("server ", server_index_, " taking over server ", primary_, "'s keys");
  if (taken_over_in_ > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": it took them over already, in view ", taken_over_in_));
  }
  if (!has_job_ || job_id_ != job_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": it holds no copy of job '", job_id, "'",
        has_job_ ? absl::StrCat(" (its copy is of job '", job_id_, "')") : std::string(),
        " (is the job replicated? replicas: 2 needs two servers or more)"));
  }
  if (view <= view_) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": view ", view,
                                                      " is not newer than view ", view_));
  }
  if (!complete_) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": its copy was still being brought up to date when the server was lost, so no "
              "complete copy is left (the job resumes from its checkpoint)"));
  }
  Handover h;
  h.job_id = job_id_;
  h.mode = mode_;
  h.num_workers = num_workers_;
  h.view = view;
  for (auto& [key, part] : parts_) {
    h.parts[key] = {std::move(part.shape), std::move(part.value), part.version,
                    std::move(part.taken), part.pushes};
  }
  h.optimizer = std::move(optimizer_);
  h.optimizer_spec = std::move(optimizer_spec_);
  h.stashes = std::move(stashes_);
  stashes_.clear();
  parts_.clear();
  optimizer_spec_.Clear();
  view_ = view;
  taken_over_in_ = view;
  return h;
}

absl::Status ReplicaStore::Check(const ReplicaMessage& update, const std::string& what,
                                 bool* another_job) const {
  if (taken_over_in_ > 0 && update.job_id() == job_id_) {
    return absl::AbortedError(absl::StrCat(
        what, ": server ", server_index_, " serves server ", primary_, "'s keys since view ",
        taken_over_in_, " (a failover): server ", primary_, " is fenced"));
  }
  if (IndexOf(update) != primary_ || update.primary() == server_index_) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this copy on server ", server_index_, " is of server ", primary_, "'s keys",
        update.primary() == server_index_ ? " (and no server backs itself up)" : ""));
  }
  if (has_job_ && update.job_id() == job_id_ && update.view() < view_) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": view ", update.view(), " is older than view ", view_));
  }
  // A copy keeps state per rank: a count beyond any cluster's is refused before it is
  // allocated (a server refuses any count but its own before that).
  if (update.num_workers() < 1 || update.num_workers() > kMaxClusterProcesses ||
      (update.mode() != SYNC_MODE_SYNC && update.mode() != SYNC_MODE_ASYNC)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": needs a worker count (1 to ",
                                                   kMaxClusterProcesses, "; got ",
                                                   update.num_workers(),
                                                   ") and a mode"));
  }
  *another_job = !has_job_ || update.job_id() != job_id_;
  if (!*another_job && (update.mode() != mode_ || update.num_workers() != num_workers_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the job's copy is ", SyncMode_Name(mode_), " with ", num_workers_,
        " workers, the update says ", SyncMode_Name(update.mode()), " with ",
        update.num_workers()));
  }
  // A new job's copy starts with its optimizer, a key's Init, or a key whole (a primary
  // bringing a backup that restarted up to date).
  if (*another_job && (update.caught_up() || (!update.has_optimizer() && !update.snapshot() &&
                                              update.version() != 0))) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this server holds no copy of that job",
        has_job_ ? absl::StrCat(" (its copy is of job '", job_id_, "')") : "",
        "; a job's copy starts with an Init (version 0)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<NDArray> ReplicaStore::Array(const Shape& shape, const ReplicaMessage& update,
                                            const std::vector<std::string>& pieces,
                                            const std::string& what) const {
  const ArrayChunk& value = update.value();
  const uint64_t bytes = static_cast<uint64_t>(shape.Size()) * sizeof(float);
  if (value.dtype() != DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": a replica is float32, got ", ShapeString(value.dtype(), value.shape())));
  }
  std::vector<std::string_view> views(pieces.begin(), pieces.end());
  if (pieces.empty()) views.push_back(value.data());
  uint64_t size = 0;
  for (std::string_view v : views) size += v.size();
  if (size != bytes || value.offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", size, " bytes at offset ",
                                                   value.offset(), " for a value of ", bytes));
  }
  ASSIGN_OR_RETURN(NDArray array, NDArray::Empty(rt_, shape));
  RETURN_IF_ERROR(array.WaitToWrite());
  CopyPieces(views, static_cast<char*>(array.data().dptr));
  return array;
}

absl::StatusOr<NDArray> ReplicaStore::PushSum(const Shape& shape, const ReplicaMessage& update,
                                              const std::vector<std::string>& pieces,
                                              const std::string& what) const {
  if (update.value().dtype() != DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": compressed pushes stand for float32 values, got ",
        ShapeString(update.value().dtype(), update.value().shape())));
  }
  const GradientCompression& compression = update.compression();
  if (absl::Status st = internal::CheckCompression(compression);
      !st.ok() || compression.type().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": pushes compressed by '", compression.type(), "': ",
        st.ok() ? "no compression named" : st.message()));
  }
  for (int i = 0; i < update.push_ranks_size(); ++i) {
    const int rank = update.push_ranks(i);
    if (rank < 0 || rank >= update.num_workers() || (i > 0 && rank <= update.push_ranks(i - 1))) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": push ranks must ascend within the job's ", update.num_workers(),
          " workers; got ", absl::StrJoin(update.push_ranks(), ", ")));
    }
  }
  const int64_t n = shape.Size();
  const uint64_t each = internal::CompressedBytes(compression, n);
  std::string packed = update.value().data();
  for (const std::string& piece : pieces) packed += piece;
  if (packed.size() != each * static_cast<uint64_t>(update.push_ranks_size()) ||
      update.value().offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", packed.size(), " bytes at offset ", update.value().offset(), " for ",
        update.push_ranks_size(), " pushes of ", n, " values in ", compression.type(), " (",
        each, " bytes each)"));
  }
  ASSIGN_OR_RETURN(NDArray array, NDArray::Empty(rt_, shape));
  RETURN_IF_ERROR(array.WaitToWrite());
  float* sum = static_cast<float*>(array.data().dptr);
  SyncRound round(update.num_workers());
  for (int i = 0; i < update.push_ranks_size(); ++i) {
    std::string values(static_cast<size_t>(n) * sizeof(float), '\0');
    internal::DecompressPush(compression, packed.data() + i * each, n,
                             reinterpret_cast<float*>(values.data()));
    SyncRound::Payload payload;
    payload.pieces.push_back(std::move(values));
    round.Accept(update.push_ranks(i), std::move(payload), sum);
  }
  // The ranks that did not push were in a barrier (joined): the round is complete.
  (void)round.Ready(std::vector<char>(update.num_workers(), 1), sum);
  return array;
}

void KeepStash(std::deque<WorkerStash>& held, WorkerStash stash) {
  std::erase_if(held, [&](const WorkerStash& s) { return s.batch >= stash.batch; });
  held.push_back(std::move(stash));
  while (held.size() > 2) held.pop_front();
}

void ReplicaStore::StartJob(const ReplicaMessage& update) {
  parts_.clear();
  stashes_.assign(static_cast<size_t>(update.num_workers()), {});
  optimizer_.reset();
  optimizer_spec_.Clear();
  taken_over_in_ = 0;
  view_ = 0;
  complete_ = true;  // every update of the job comes (until a resync's snapshots)
  has_job_ = true;
  job_id_ = update.job_id();
  mode_ = update.mode();
  num_workers_ = update.num_workers();
}

absl::Status ReplicaStore::ApplyStash(const ReplicaMessage& update, const std::vector<std::string>& pieces,
                                      bool another_job, const std::string& what) {
  if (update.stash_rank() < 0 || update.stash_rank() >= update.num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the job has ranks 0 to ", update.num_workers() - 1));
  }
  auto bytes = std::make_shared<std::string>(update.value().data());
  for (const std::string& piece : pieces) *bytes += piece;
  if (update.value().dtype() != DT_FLOAT32 || bytes->size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bytes->size(), " bytes are no float32 values"));
  }
  if (another_job) StartJob(update);
  view_ = update.view();
  KeepStash(stashes_[update.stash_rank()], {update.stash_batch(), std::move(bytes)});
  return absl::OkStatus();
}

absl::Status ReplicaStore::Apply(ReplicaMessage update, std::vector<std::string> pieces) {
  const int key = update.value().key();
  const std::string what =
      update.has_optimizer()
          ? absl::StrCat("replica of the optimizer (job '", update.job_id(), "') from server ",
                         update.primary())
      : update.has_stash_batch()
          ? absl::StrCat("replica of worker ", update.stash_rank(), "'s state after batch ",
                         update.stash_batch(), " (job '", update.job_id(), "') from server ",
                         update.primary())
          : absl::StrCat("replica of key ", key, " (", update.snapshot() ? "snapshot at " : "",
                         "version ", update.version(), ", job '", update.job_id(),
                         "') from server ", update.primary());
  bool another_job = false;
  RETURN_IF_ERROR(Check(update, what, &another_job));
  if (update.has_stash_batch()) return ApplyStash(update, pieces, another_job, what);
  if (update.caught_up()) {  // every update before it is applied: the copy is whole
    complete_ = true;
    return absl::OkStatus();
  }
  if (update.has_optimizer()) {
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(update.optimizer());
    if (!optimizer.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", optimizer.status().message()));
    if (another_job) StartJob(update);
    view_ = update.view();
    optimizer_ = *std::move(optimizer);
    optimizer_spec_ = update.optimizer();
    if (update.snapshot()) complete_ = false;  // a resync's first message
    return absl::OkStatus();
  }
  if (update.taken_size() != update.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", update.taken_size(),
                                                   " push counts for ", update.num_workers(),
                                                   " workers"));
  }
  const Shape shape(update.value().shape().begin(), update.value().shape().end());
  auto it = another_job ? parts_.end() : parts_.find(key);
  Part* held = it == parts_.end() ? nullptr : &it->second;
  if (held == nullptr && update.version() != 0 && !update.snapshot()) {
    return absl::NotFoundError(
        absl::StrCat(what, ": no copy of the key (its Init, version 0, never came)"));
  }
  if (held != nullptr && held->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": value float32 ", shape.ToString(),
                                                   " but the copy is float32 ",
                                                   held->shape.ToString()));
  }
  if (held != nullptr && !update.snapshot() && update.version() <= held->version) {
    return absl::OkStatus();  // a resend
  }
  if (held != nullptr && update.snapshot() && update.version() < held->version) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the copy is at version ",
                                                      held->version, " already"));
  }
  if (held != nullptr && !update.snapshot() && update.version() > held->version + 1) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the copy is at version ",
                                                      held->version, ", so version ",
                                                      held->version + 1, " was lost"));
  }
  const bool pushes = update.value().compressed();
  if (pushes && (held == nullptr || update.snapshot() || update.push_ranks_size() == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": only an update of a key held (not an Init or a snapshot) comes as pushes, "
              "and it names their ranks"));
  }
  ASSIGN_OR_RETURN(NDArray array, pushes ? PushSum(shape, update, pieces, what)
                                         : Array(shape, update, pieces, what));
  if (held != nullptr && !update.snapshot()) {
    // The next version: the primary's update, applied as the primary applied it. The engine
    // runs it after this returns (the key's updates in order), so the acknowledgement does
    // not wait for the optimizer; reading the copy waits for it.
    if (optimizer_ != nullptr) {
      if (absl::Status pushed = optimizer_->Update(key, held->value, array); !pushed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", pushed.message()));
      }
    } else {
      held->value = std::move(array);
    }
  } else {
    // An Init, or a snapshot: the value (and optimizer slot) as sent.
    if (update.snapshot() && optimizer_ != nullptr) {
      absl::Status loaded = optimizer_->LoadSlot(rt_, key, update.optimizer_slot());
      if (!loaded.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", loaded.message()));
    }
    if (another_job) StartJob(update);
    held = &parts_[key];
    held->shape = shape;
    held->value = std::move(array);
  }
  view_ = update.view();
  held->version = update.version();
  held->pushes = update.pushes();
  held->taken.assign(update.taken().begin(), update.taken().end());
  if (update.snapshot()) complete_ = false;  // until the resync's caught_up
  return absl::OkStatus();
}

}  // namespace tessera::kvstore

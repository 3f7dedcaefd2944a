#include "kvstore/server_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "kvstore/internal/compression.h"
#include "kvstore/internal/optimizer_spec.h"
#include "kvstore/kvstore_metrics.h"
#include "spdlog/spdlog.h"

namespace tessera::kvstore {
namespace {

}  // namespace

// ---------------------------------------------------------------------------------------
// Session

ServerStore::Session::~Session() { Close(absl::UnavailableError("stream closed")); }

void ServerStore::Session::Close(const absl::Status& why) {
  if (closed_) return;
  closed_ = true;
  store_->Leave(this, why);
}

void ServerStore::Session::Handle(WorkerMessage message) {
  if (closed_) return;
  const uint64_t id = message.id();
  auto staged = [&](ArrayChunk& chunk, auto handler) {
    if (chunk.in_shared_memory()) {  // nothing to stage: the payload is in the worker's slot
      if (chunk.offset() != 0 || !chunk.last() || !chunk.data().empty()) {
        return send_({ErrorReply(id, absl::InvalidArgumentError(absl::StrCat(
                                         "key ", chunk.key(), ": request ", id,
                                         " in shared memory must be one chunk without data")))});
      }
      return (store_->*handler)(this, id, chunk, {});
    }
    absl::StatusOr<std::optional<RequestAssembler::Request>> done =
        assembler_.Add(id, chunk, parked_bytes_.load());
    if (!done.ok()) {
      send_({ErrorReply(id, done.status())});
    } else if (done->has_value()) {
      // A compressed push is decompressed by AcceptPush, which keeps it as sent.
      RequestAssembler::Request& request = **done;
      (store_->*handler)(this, id, request.header, std::move(request.pieces));
    }
  };
  switch (message.body_case()) {
    case WorkerMessage::kHello: store_->Greet(this, id, message.hello()); break;
    case WorkerMessage::kInit: staged(*message.mutable_init(), &ServerStore::Init); break;
    case WorkerMessage::kPush:
      store_->metrics_.push_bytes.Increment(
          static_cast<double>(message.push().data().size()));
      staged(*message.mutable_push(), &ServerStore::Push);
      break;
    case WorkerMessage::kPushPull:
      store_->metrics_.push_bytes.Increment(
          static_cast<double>(message.push_pull().data().size()));
      staged(*message.mutable_push_pull(), &ServerStore::PushPull);
      break;
    case WorkerMessage::kPull: store_->Pull(this, id, message.pull()); break;
    case WorkerMessage::kBarrier: store_->Barrier(this, id); break;
    case WorkerMessage::kMapKey:
      store_->MapKey(this, id, message.map_key());
      break;
    case WorkerMessage::kLeave: leaving_ = true; break;
    case WorkerMessage::kStash:
      if (message.stash().in_shared_memory()) {
        send_({ErrorReply(id, absl::InvalidArgumentError(absl::StrCat(
                                  "stash ", id, ": a stash travels on the stream")))});
        break;
      }
      staged(*message.mutable_stash(), &ServerStore::Stash);
      break;
    case WorkerMessage::kUnstash: store_->Unstash(this, id, message.unstash()); break;
    default:
      send_({ErrorReply(
          id, absl::InvalidArgumentError(absl::StrCat("request ", id, " carries no request")))});
  }
}

// ---------------------------------------------------------------------------------------
// ServerStore

ServerStore::ServerStore(const Runtime& rt, ServerStoreOptions options,
                         std::unique_ptr<ReplicaLink> backup)
    : rt_(rt),
      options_(options),
      metrics_(options_.metrics != nullptr ? *options_.metrics : KVStoreServerMetrics()),
      members_(options_.server_index, options_.num_workers),
      slot_budget_(options_.server_index, {.enabled = options_.shared_memory,
                                           .min_key_bytes = options_.shared_memory_min_bytes,
                                           .max_bytes = options_.max_shared_memory_bytes,
                                           .max_keys = options_.max_shared_memory_keys}),
      backup_(std::move(backup)),
      has_backup_(backup_ != nullptr),
      backup_peer_(backup_ != nullptr ? backup_->peer() : "") {
  sessions_.assign(options_.num_workers, nullptr);
  stashes_.assign(options_.num_workers, {});
  if (options_.watch_deadlines) watchdog_ = std::thread([this] { WatchDeadlines(); });
}

ServerStore::~ServerStore() {
  backup_.reset();  // no acknowledgement comes in from here on
  {
    MutexLock lock(&watchdog_mu_);
    stopping_ = true;
    watchdog_cv_.SignalAll();
  }
  if (watchdog_.joinable()) watchdog_.join();
  WriterLock lock(&mu_);
  for (auto& [id, key] : keys_) {
    (void)key.value.WaitToWrite();
    if (!key.merged.is_none()) (void)key.merged.WaitToWrite();
  }
}

std::unique_ptr<ServerStore::Session> ServerStore::Open(Send send) {
  return std::unique_ptr<Session>(new Session(this, std::move(send)));
}

std::unique_ptr<ServerStore::ReplicaSession> ServerStore::OpenReplicaSession() {
  return std::unique_ptr<ReplicaSession>(new ReplicaSession(this));
}

std::optional<ReplicaAck> ServerStore::ReplicaSession::Handle(ReplicaMessage message) {
  const uint64_t id = message.id();
  absl::StatusOr<std::optional<ReplicaReceiver::Whole>> whole =
      receiver_.Add(std::move(message));
  absl::Status status = whole.status();
  if (whole.ok()) {
    if (!whole->has_value()) return std::nullopt;
    const int index = ReplicaStore::IndexOf((*whole)->update);
    const int workers = (*whole)->update.num_workers();
    if (!store_->MayBackUp(index)) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "replica of server ", index, "'s keys: server ", store_->options_.server_index,
          " holds copies of its left neighbour's keys and its own only"));
    } else if (workers != store_->options_.num_workers) {
      // (Checked before a copy keeps per-rank state for that many workers.)
      status = absl::FailedPreconditionError(absl::StrCat(
          "replica of server ", index, "'s keys for ", workers, " workers: server ",
          store_->options_.server_index, " serves ", store_->options_.num_workers));
    } else {
      MutexLock lock(&store_->replica_mu_);
      auto it = store_->replicas_.find(index);
      if (it == store_->replicas_.end()) {
        it = store_->replicas_
                 .try_emplace(index, store_->rt_, store_->options_.server_index,
                              store_->options_.num_servers, index)
                 .first;
      }
      status = it->second.Apply(std::move((*whole)->update), std::move((*whole)->pieces));
      if (status.ok()) store_->metrics_.backup_updates.Increment();
    }
  }
  ReplicaAck ack;
  ack.set_id(id);
  ack.set_code(static_cast<int>(status.code()));
  ack.set_message(std::string(status.message()));
  return ack;
}

bool ServerStore::MayBackUp(int index) const {
  const int n = options_.num_servers;
  return n >= 2 && (index == options_.server_index ||
                    index == (options_.server_index + n - 1) % n);
}

absl::StatusOr<ReplicaStore::Handover> ServerStore::HandOverBackup(const std::string& job_id,
                                                                   uint64_t view, int index) {
  const int n = options_.num_servers;
  if (index < 0) index = (options_.server_index + n - 1) % n;
  MutexLock lock(&replica_mu_);
  auto it = replicas_.find(index);
  if (it == replicas_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", options_.server_index, " taking over server ", index,
        "'s keys: it holds no copy of them (is the job replicated? replicas: 2 needs two "
        "servers or more)"));
  }
  return it->second.TakeOver(job_id, view);
}

absl::StatusOr<std::unique_ptr<ServerStore>> ServerStore::TakeOver(
    const Runtime& rt, ServerStoreOptions options, ReplicaStore::Handover handover,
    std::unique_ptr<ReplicaLink> backup) {
  if (handover.num_workers != options.num_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "taking over server ", options.server_index, "'s keys: the copy is of a job with ",
        handover.num_workers, " workers, this server serves ", options.num_workers));
  }
  options.view = handover.view;
  options.shared_memory = false;  // the workers' slots are in the lost server's memory
  auto store =
      std::unique_ptr<ServerStore>(new ServerStore(rt, std::move(options), std::move(backup)));
  store->backup_lost_ = true;  // its backup has no copy yet: ResyncBackup sends it one
  WriterLock lock(&store->mu_);
  store->members_.Adopt(handover.job_id, handover.mode);
  store->optimizer_ = std::move(handover.optimizer);
  store->optimizer_spec_ = std::move(handover.optimizer_spec);
  for (auto& [key_id, part] : handover.parts) {
    Key& key = store->keys_.try_emplace(key_id, store->options_.num_workers).first->second;
    key.shape = std::move(part.shape);
    key.value = std::move(part.value);
    ASSIGN_OR_RETURN(key.merged, NDArray::Empty(rt, key.shape));
    key.version = static_cast<int64_t>(part.version);
    key.pushes = part.pushes;
    if (handover.mode == SYNC_MODE_SYNC) key.round.Restore(key.version);
    for (int r = 0; r < store->options_.num_workers && r < static_cast<int>(part.taken.size());
         ++r) {
      key.taken[r] = part.taken[r];
      // Every push the copy took is in a completed round: a push_pull sent again is answered
      // with the value as it is.
      key.in_round[r] = {part.taken[r], key.version};
    }
  }
  for (size_t rank = 0; rank < handover.stashes.size() && rank < store->stashes_.size(); ++rank) {
    store->stashes_[rank] = std::move(handover.stashes[rank]);
  }
  spdlog::info("server index {} taken over in view {}: {} key parts of job '{}' at their "
               "replicated versions",
               store->options_.server_index, store->options_.view, store->keys_.size(),
               handover.job_id);
  return store;
}

absl::StatusOr<ReplicaStore::Copy> ServerStore::BackupCopy(int key, int index) const {
  const int n = options_.num_servers;
  if (index < 0) index = (options_.server_index + n - 1) % n;
  MutexLock lock(&replica_mu_);
  auto it = replicas_.find(index);
  if (it == replicas_.end()) {
    return absl::NotFoundError(absl::StrCat("server ", options_.server_index,
                                            " holds no backup copy of server ", index,
                                            "'s key ", key));
  }
  return it->second.Find(key);
}

void ServerStore::CatchUp() {
  // From now on pulls wait for the backup again. Workers have seen values of updates sent
  // during the resync that the backup may not have applied yet: the marker, queued behind all
  // of them, makes its copy complete once it arrives (a takeover refuses an incomplete copy).
  catching_up_ = true;
  backup_lost_ = false;
  ReplicaMessage marker;
  uint64_t epoch = 0;
  {
    ReaderLock lock(&mu_);
    marker = ReplicaHeader();
    epoch = job_epoch_;
  }
  marker.set_caught_up(true);
  backup_->Send(std::move(marker), {}, [this, epoch](const absl::Status& status) {
    if (status.code() == absl::StatusCode::kAborted) return Fence(status);
    if (!status.ok()) return LoseBackup(status);
    {
      ReaderLock lock(&mu_);
      if (epoch != job_epoch_) return;
    }
    catching_up_ = false;
    spdlog::info("server index {}: its backup {} holds every key again", options_.server_index,
                 backup_peer_);
  });
}

void ServerStore::ResyncBackup() {
  if (!has_backup_ || !backup_lost_.load() || resyncing_.load() || fenced_.load()) return;
  WriterLock lock(&mu_);
  const absl::Time now = options_.clock();
  // (No worker connected: the job is over, or not begun; its next worker's Hello starts anew.)
  if (keys_.empty() || members_.connected_count() == 0 || resyncing_.load() ||
      now - last_resync_ < absl::Milliseconds(resync_wait_ms_.load())) {
    return;
  }
  last_resync_ = now;
  resync_spoiled_ = false;
  auto resync = std::make_shared<Resync>();
  resync->left = static_cast<int>(keys_.size()) + (optimizer_ != nullptr ? 1 : 0);
  resyncing_ = true;
  if (optimizer_ != nullptr) ReplicateOptimizer(resync);
  for (auto& [key_id, key] : keys_) {
    Replicate(key_id, key, key.value, key.round.rounds_done(), /*snapshot=*/true, resync);
  }
  for (size_t rank = 0; rank < stashes_.size(); ++rank) {
    for (const WorkerStash& stash : stashes_[rank]) ReplicateStash(static_cast<int>(rank), stash);
  }
}

ReplicaMessage ServerStore::ReplicaHeader() const {
  ReplicaMessage message;
  message.set_job_id(members_.job_id());
  message.set_primary(options_.host_index >= 0 ? options_.host_index : options_.server_index);
  message.set_index(options_.server_index);
  message.set_view(options_.view);
  message.set_mode(members_.mode());
  message.set_num_workers(options_.num_workers);
  return message;
}

void ServerStore::SendReplica(ReplicaMessage message, ReplicaLink::Payload payload, int key_id,
                              int64_t version, std::shared_ptr<Resync> resync) {
  const double bytes = static_cast<double>(payload.bytes.size());
  backup_->Send(std::move(message), std::move(payload),
                [this, key_id, version, bytes, epoch = job_epoch_, sent = options_.clock(),
                 resync = std::move(resync)](const absl::Status& st) {
                  if (st.ok()) {
                    metrics_.replica_updates.Increment();
                    metrics_.replica_bytes.Increment(bytes);
                    metrics_.replica_seconds.Observe(
                        absl::ToDoubleSeconds(options_.clock() - sent));
                  }
                  OnReplicaAck(key_id, version, epoch, st);
                  if (resync == nullptr) return;
                  if (!st.ok()) resync->failed = true;
                  if (--resync->left > 0) return;
                  // The last snapshot: the backup holds every key, and the updates since follow.
                  if (resync->failed.load() || resync_spoiled_.load()) {
                    // Tried again later, less often while it keeps failing (each try copies
                    // every key).
                    resync_wait_ms_ = std::min<int64_t>(2 * resync_wait_ms_.load(), 8'000);
                  } else if (resyncing_.load()) {
                    resync_wait_ms_ = 2'000;
                    CatchUp();
                  }
                  resyncing_ = false;
                });
}

ReplicaMessage ServerStore::ReplicaUpdate(int key_id, const Key& key, int64_t rounds,
                                          bool snapshot) const {
  ReplicaMessage update = ReplicaHeader();
  update.set_version(static_cast<uint64_t>(key.version));
  update.set_pushes(key.pushes);
  update.set_snapshot(snapshot);
  ArrayChunk& value = *update.mutable_value();
  value.set_key(key_id);
  value.set_dtype(DT_FLOAT32);
  for (int64_t d : key.shape.dims()) value.add_shape(d);
  // Per rank, its newest push in this value. dist_sync: a worker's pushes of a key are
  // numbered without gaps, so one in the open round means the one before it is applied.
  for (int r = 0; r < options_.num_workers; ++r) {
    uint64_t applied = key.taken[r];
    if (sync()) {
      const Key::InRound& in = key.in_round[r];
      applied = in.seq == 0 || in.round <= rounds ? in.seq : in.seq - 1;
    }
    update.add_taken(applied);
  }
  return update;
}

void ServerStore::Replicate(int key_id, Key& key, const NDArray& sent, int64_t rounds,
                            bool snapshot, std::shared_ptr<Resync> resync) {
  if (!Sending()) return;
  ReplicaMessage update = ReplicaUpdate(key_id, key, rounds, snapshot);
  if (snapshot && optimizer_ != nullptr) {
    absl::StatusOr<std::string> slot = optimizer_->SaveSlot(key_id);
    if (!slot.ok() && resync == nullptr) return LoseBackup(slot.status());
    if (slot.ok()) {
      update.set_optimizer_slot(*std::move(slot));
    } else {
      resync->failed = true;  // sent all the same: the resync counts every key's answer
    }
  }
  auto copy = std::make_shared<const std::string>(
      static_cast<const char*>(sent.data().dptr),
      static_cast<size_t>(key.shape.Size()) * sizeof(float));
  const std::string_view bytes = *copy;
  SendReplica(std::move(update), {std::move(copy), bytes}, key_id, key.version, std::move(resync));
}

std::optional<NDArray> ServerStore::LendMerged(int key_id, Key& key, int64_t rounds) {
  if (!Sending()) return std::nullopt;
  absl::StatusOr<NDArray> fresh = NDArray::Empty(rt_, key.shape);
  if (!fresh.ok()) {  // no buffer to spare: a copy, which may still fit
    Replicate(key_id, key, key.merged, rounds);
    return std::nullopt;
  }
  auto lent = std::make_shared<const NDArray>(key.merged);
  const std::string_view bytes(static_cast<const char*>(lent->data().dptr),
                               static_cast<size_t>(key.shape.Size()) * sizeof(float));
  SendReplica(ReplicaUpdate(key_id, key, rounds, /*snapshot=*/false), {std::move(lent), bytes},
              key_id, key.version);
  return *std::move(fresh);
}

bool ServerStore::ReplicatePushes(int key_id, Key& key, int64_t rounds,
                                  const std::vector<std::pair<int, const std::string*>>& pushes) {
  if (!Sending() || !compression_.has_value() || pushes.empty()) return false;
  uint64_t bytes = 0;
  for (const auto& [rank, packed] : pushes) {
    if (packed->empty()) return false;  // one came uncompressed (through shared memory)
    bytes += packed->size();
  }
  if (bytes >= static_cast<uint64_t>(key.shape.Size()) * sizeof(float)) return false;
  ReplicaMessage update = ReplicaUpdate(key_id, key, rounds, /*snapshot=*/false);
  update.mutable_value()->set_compressed(true);
  *update.mutable_compression() = *compression_;
  auto joined = std::make_shared<std::string>();
  joined->reserve(bytes);
  for (const auto& [rank, packed] : pushes) {
    update.add_push_ranks(rank);
    *joined += *packed;
  }
  const std::string_view view = *joined;
  SendReplica(std::move(update), {std::move(joined), view}, key_id, key.version);
  return true;
}

void ServerStore::Diverged(int key_id, const absl::Status& why) {
  if (!has_backup_) return;
  LoseBackup(absl::InternalError(absl::StrCat("key ", key_id, ": the backup applied an update "
                                              "this server could not: ", why.message())));
}

void ServerStore::ReplicateOptimizer(std::shared_ptr<Resync> resync) {
  if (!Sending()) return;
  ReplicaMessage message = ReplicaHeader();
  *message.mutable_optimizer() = optimizer_spec_;
  // A resync's first message: the copy is incomplete from here to the caught_up marker.
  message.set_snapshot(resync != nullptr);
  SendReplica(std::move(message), {}, -1, 0, std::move(resync));
}

void ServerStore::OnReplicaAck(int key_id, int64_t version, uint64_t epoch,
                             const absl::Status& status) {
  if (status.code() == absl::StatusCode::kAborted) return Fence(status);
  if (!status.ok()) {
    if (resyncing_.load()) resync_spoiled_ = true;  // an update the backup missed
    LoseBackup(status);
  }
  if (key_id < 0) return;  // an optimizer or a worker's stash: nothing waits for it
  ReaderLock lock(&mu_);
  if (epoch != job_epoch_) return;  // the last job's
  auto it = keys_.find(key_id);
  if (it == keys_.end()) return;
  Key& key = it->second;
  MutexLock key_lock(&key.mu);
  if (status.ok()) key.replicated = std::max(key.replicated, version);
  ServePulls(key_id, key);
}

void ServerStore::LoseBackup(const absl::Status& why) {
  if (backup_lost_.exchange(true)) return;  // (a resync in flight fails by its own acks)
  metrics_.backup_losses.Increment();
  spdlog::error("server {}: replication to its backup {} failed, so it keeps the only copy of its "
                "keys for the rest of this job: {}",
                options_.server_index, backup_peer_, why.ToString());
}

void ServerStore::Fence(const absl::Status& why) {
  WriterLock lock(&mu_);
  if (fenced_.load()) return;
  fenced_why_ = absl::AbortedError(
      absl::StrCat("server ", options_.server_index, " no longer serves job '",
                   members_.job_id(), "': ", why.message()));
  fenced_ = true;
  spdlog::error("{}", fenced_why_.ToString());
  for (auto& [key_id, key] : keys_) {
    for (const PendingPull& p : key.pulls) Answer(p, {ErrorReply(p.waiter.id, fenced_why_)});
    key.pulls.clear();
    DropParked(key, nullptr, fenced_why_);
  }
  if (members_.barrier_waiting()) AnswerBarrier(fenced_why_);
}

void ServerStore::AckWhenReplicated(Session* s, uint64_t id, int key_id, Key& key,
                                    int64_t round) {
  const PendingPull ack{Waiter{s, id}, s->rank_, round, /*shared=*/false, /*ack_only=*/true};
  if (!has_backup_ || backup_lost_.load() || Ready(key, ack)) return s->send_({OkReply(id)});
  ++s->waiting_;  // taken already: past the waiting bound
  key.pulls.push_back(ack);
  ServePulls(key_id, key);
}

absl::Status ServerStore::CheckSession(const Session* s) const {
  if (fenced_.load()) return fenced_why_;
  if (s->rank_ < 0) return absl::FailedPreconditionError("send Hello before any request");
  return absl::OkStatus();
}

void ServerStore::Greet(Session* s, uint64_t id, const Hello& hello) {
  WriterLock lock(&mu_);
  auto fail = [&](absl::Status status) { s->send_({ErrorReply(id, status)}); };
  if (hello.protocol_version() != kKVStoreProtocolVersion) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("protocol version ", hello.protocol_version(), " is not served (this server "
                     "speaks ", kKVStoreProtocolVersion, ")")));
  }
  if (s->rank_ >= 0) return fail(absl::FailedPreconditionError("Hello sent twice"));
  if (hello.rejoin() && (hello.job_id() != members_.job_id() || fenced_.load())) {
    // A replacement rejoins a run this store serves, in whatever view it serves it in.
    return fail(absl::NotFoundError(absl::StrCat(
        "server ", options_.server_index, " serves no run of job '", hello.job_id(),
        "' for worker ", hello.rank(), " to rejoin")));
  }
  if (hello.view() != options_.view && !hello.rejoin()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "worker ", hello.rank(), " is in view ", hello.view(), ", but server ",
        options_.server_index, " serves in view ", options_.view)));
  }
  if (fenced_.load() && hello.job_id() == members_.job_id()) return fail(fenced_why_);
  bool started = false;
  if (absl::Status st = CheckCompression(hello, members_.job_id() != hello.job_id()); !st.ok()) {
    return fail(st);
  }
  const absl::Status admitted = members_.Admit(hello, &started);
  if (admitted.ok() && (started || !compression_.has_value())) {
    compression_ = hello.compression();
    if (!compression_->type().empty() || !compression_->pull_type().empty()) {
      spdlog::info("server {}: job '{}' pushes {}", options_.server_index, hello.job_id(),
                   internal::DescribeCompression(*compression_));
    }
  }
  if (started) {
    // A new job: nothing of the last one carries over.
    for (auto& [key_id, key] : keys_) {
      (void)key.value.WaitToWrite();
      (void)key.merged.WaitToWrite();
    }
    keys_.clear();
    stashes_.assign(options_.num_workers, {});
    slot_budget_.Reset();
    optimizer_.reset();
    optimizer_spec_.Clear();
    ++job_epoch_;
    backup_lost_ = false;  // the new job tries its backup afresh
    fenced_ = false;
  }
  if (!admitted.ok()) return fail(admitted);
  s->rank_ = hello.rank();
  sessions_[s->rank_] = s;
  ServerMessage reply = OkReply(id);
  reply.mutable_hello()->set_server_index(options_.server_index);
  reply.mutable_hello()->set_num_servers(options_.num_servers);
  reply.mutable_hello()->set_max_chunk_bytes(options_.max_chunk_bytes);
  reply.mutable_hello()->set_serves_push_pull(true);
  reply.mutable_hello()->set_view(options_.view);
  if (options_.shared_memory) {
    reply.mutable_hello()->set_shared_memory_min_bytes(options_.shared_memory_min_bytes);
  }
  if (hello.rejoin()) {
    WorkerProgress* progress = reply.mutable_hello()->mutable_progress();
    progress->set_barriers(members_.barriers_opened());
    for (auto& [key_id, key] : keys_) {
      MutexLock key_lock(&key.mu);
      if (key.taken[s->rank_] > 0) (*progress->mutable_pushes())[key_id] = key.taken[s->rank_];
    }
    spdlog::info("server {}: worker {} rejoins job '{}' after {} barriers", options_.server_index,
                 s->rank_, members_.job_id(), members_.barriers_opened());
  }
  s->send_({std::move(reply)});
}

absl::StatusOr<ServerStore::Key*> ServerStore::LookUp(const char* what, int key_id) {
  auto it = keys_.find(key_id);
  if (it == keys_.end()) {
    return absl::NotFoundError(
        absl::StrCat(what, " of key ", key_id, ": the key is not initialized (Init it first)"));
  }
  return &it->second;
}

absl::StatusOr<ServerStore::Key*> ServerStore::FindKey(const char* what, const ArrayChunk& header) {
  ASSIGN_OR_RETURN(Key * key, LookUp(what, header.key()));
  const Shape shape(header.shape().begin(), header.shape().end());
  if (header.dtype() != DT_FLOAT32 || shape != key->shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of key ", header.key(), ": got ", ShapeString(header.dtype(), header.shape()),
        " but the key holds float32 ", key->shape.ToString()));
  }
  return key;
}

void ServerStore::Init(Session* s, uint64_t id, const ArrayChunk& header,
                       std::vector<std::string> pieces) {
  WriterLock lock(&mu_);
  // Runs here, under the lock: annotated, as the analysis checks a lambda on its own.
  auto status = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    RETURN_IF_ERROR(CheckSession(s));
    if (header.in_shared_memory() || header.compressed()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Init of key ", header.key(),
          ": an Init carries its float32 value (no shared memory yet, no compression)"));
    }
    if (keys_.count(header.key())) {  // the first value wins
      ASSIGN_OR_RETURN(Key * key, FindKey("Init", header));
      AckWhenReplicated(s, id, header.key(), *key, 0);
      return absl::OkStatus();
    }
    if (header.dtype() != DT_FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Init of key ", header.key(), ": the parameter server holds float32 arrays, got ",
          ShapeString(header.dtype(), header.shape())));
    }
    const Shape shape(header.shape().begin(), header.shape().end());
    ASSIGN_OR_RETURN(NDArray value, NDArray::Empty(rt_, shape));
    ASSIGN_OR_RETURN(NDArray merged, NDArray::Empty(rt_, shape));
    RETURN_IF_ERROR(value.WaitToWrite());
    CopyPieces({pieces.begin(), pieces.end()}, static_cast<char*>(value.data().dptr));
    // A Key holds a mutex: made in place.
    Key& key = keys_.try_emplace(header.key(), options_.num_workers).first->second;
    key.shape = shape;
    key.value = std::move(value);
    key.merged = std::move(merged);
    const uint64_t bytes = static_cast<uint64_t>(shape.Size()) * sizeof(float);
    key.shared = slot_budget_.Share(header.key(), bytes, options_.num_workers);
    Replicate(header.key(), key, key.value, 0);
    AckWhenReplicated(s, id, header.key(), key, 0);
    return absl::OkStatus();
  }();
  if (!status.ok()) s->send_({ErrorReply(id, status)});
}

SyncRound::Payload ServerStore::Payload(const Key& key, int rank, std::vector<std::string> pieces,
                                        bool shared) {
  if (shared) {
    return {.in_place = key.shared->view(rank)};
  }
  return {.pieces = std::move(pieces)};
}

void ServerStore::MapKey(Session* s, uint64_t id, const MapKeyRequest& request) {
  ReaderLock lock(&mu_);
  auto fail = [&](absl::Status status) { s->send_({ErrorReply(id, status)}); };
  if (absl::Status st = CheckSession(s); !st.ok()) return fail(st);
  absl::StatusOr<Key*> found = LookUp("MapKey", request.key());
  if (!found.ok()) return fail(found.status());
  const Key& key = **found;  // `shared` is set at Init, under the store's lock
  if (!key.shared.has_value()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "MapKey of key ", request.key(), ": server ", options_.server_index,
        " does not share it (it shares keys of at least ", options_.shared_memory_min_bytes,
        " bytes with workers on its host, when serving a Unix socket)")));
  }
  ServerMessage reply = OkReply(id);
  reply.mutable_slot()->set_path(key.shared->path());
  reply.mutable_slot()->set_offset(key.shared->offset(s->rank_));
  reply.mutable_slot()->set_size(static_cast<uint64_t>(key.shape.Size()) * sizeof(float));
  s->send_({std::move(reply)});
}

absl::Status ServerStore::CheckCompression(const Hello& hello, bool new_job) const {
  const GradientCompression& c = hello.compression();
  if (absl::Status st = internal::CheckCompression(c); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", hello.rank(), "'s compression: ", st.message()));
  }
  if (new_job || !compression_.has_value()) return absl::OkStatus();
  if (c.type() != compression_->type() || c.threshold() != compression_->threshold() ||
      c.pull_type() != compression_->pull_type()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", hello.rank(), " pushes ", internal::DescribeCompression(c), ", but the workers of job '",
        members_.job_id(), "' push ", internal::DescribeCompression(*compression_), " to server ",
        options_.server_index, ": every worker of a job compresses alike"));
  }
  return absl::OkStatus();
}

absl::Status ServerStore::Decompress(ArrayChunk* header, std::vector<std::string>* pieces,
                                     std::string* packed) const {
  GradientCompression compression;
  {
    ReaderLock lock(&mu_);
    if (!compression_.has_value() || compression_->type().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push of key ", header->key(), " is compressed, but the workers of job '",
          members_.job_id(), "' do not compress (their Hello says so)"));
    }
    compression = *compression_;
  }
  if (header->dtype() != DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("compressed push of key ", header->key(),
                                                   ": its values must be float32"));
  }
  int64_t n = 1;
  for (int64_t d : header->shape()) n *= d;
  packed->clear();
  for (const std::string& piece : *pieces) *packed += piece;
  if (packed->size() != internal::CompressedBytes(compression, n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressed push of key ", header->key(), ": ", packed->size(), " bytes, but ", n,
        " values take ", internal::CompressedBytes(compression, n), " in ", compression.type()));
  }
  std::string values(static_cast<size_t>(n) * sizeof(float), '\0');
  internal::DecompressPush(compression, packed->data(), n, reinterpret_cast<float*>(values.data()));
  pieces->assign(1, std::move(values));
  header->clear_compressed();
  return absl::OkStatus();
}

void ServerStore::Stash(Session* s, uint64_t id, const ArrayChunk& header,
                        std::vector<std::string> pieces) {
  if (header.compressed()) {
    return s->send_({ErrorReply(id, absl::InvalidArgumentError(absl::StrCat(
        "stash of worker ", s->rank_, "'s batch ", header.seq(),
        ": a worker's state is stashed as float32 values, not compressed")))});
  }
  std::string bytes;
  for (const std::string& piece : pieces) bytes += piece;
  WriterLock lock(&mu_);
  if (absl::Status st = CheckSession(s); !st.ok()) return s->send_({ErrorReply(id, st)});
  if (!members_.replaces_workers()) {
    return s->send_({ErrorReply(id, absl::FailedPreconditionError(absl::StrCat(
        "stash of worker ", s->rank_, "'s batch ", header.seq(), ": job '", members_.job_id(),
        "' does not replace lost workers, so server ", options_.server_index,
        " keeps no worker state")))});
  }
  WorkerStash stash{header.seq(), std::make_shared<const std::string>(std::move(bytes))};
  if (has_backup_ && !backup_lost_.load()) ReplicateStash(s->rank_, stash);
  KeepStash(stashes_[s->rank_], std::move(stash));
  s->send_({OkReply(id)});
}

void ServerStore::ReplicateStash(int rank, const WorkerStash& stash) {
  ReplicaMessage message = ReplicaHeader();
  message.set_stash_batch(stash.batch);
  message.set_stash_rank(rank);
  message.mutable_value()->set_dtype(DT_FLOAT32);
  message.mutable_value()->add_shape(static_cast<int64_t>(stash.bytes->size() / sizeof(float)));
  SendReplica(std::move(message), {stash.bytes, *stash.bytes}, /*key_id=*/-1, 0);
}

void ServerStore::Unstash(Session* s, uint64_t id, const UnstashRequest& request) {
  ReaderLock lock(&mu_);
  if (absl::Status st = CheckSession(s); !st.ok()) return s->send_({ErrorReply(id, st)});
  const std::deque<WorkerStash>& stashed = stashes_[s->rank_];
  for (const WorkerStash& st : stashed) {
    if (st.batch != request.batch()) continue;
    ArrayChunk header;
    header.set_dtype(DT_FLOAT32);
    header.add_shape(static_cast<int64_t>(st.bytes->size() / sizeof(float)));
    return s->send_(ChunkedReply(id, header, st.bytes->data(), st.bytes->size()));
  }
  std::vector<std::string> held;
  for (const WorkerStash& st : stashed) held.push_back(absl::StrCat(st.batch));
  s->send_({ErrorReply(id, absl::NotFoundError(absl::StrCat(
      "unstash of worker ", s->rank_, "'s state after batch ", request.batch(), ": server ",
      options_.server_index, " holds ",
      held.empty() ? std::string("none of its states") : absl::StrCat("its batches ", absl::StrJoin(held, ", ")))))});
}

absl::Status ServerStore::Apply(int key_id, Key& key, const NDArray& grad) {
  if (optimizer_ == nullptr) {
    // No updater: the (summed) push becomes the value, as MXNet's server without one.
    std::swap(key.value, key.merged);
    metrics_.updates.Increment();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(optimizer_->Update(key_id, key.value, grad));
  RETURN_IF_ERROR(key.value.WaitToRead());
  metrics_.updates.Increment();
  return absl::OkStatus();
}

// Whether `key`'s open round waits on a worker that left; that worker's reason if so.
static absl::Status RoundBlocked(int key_id, int64_t round, const std::vector<char>& pushed,
                                 const std::vector<absl::Status>& departed) {
  for (size_t r = 0; r < pushed.size(); ++r) {
    if (!pushed[r] && !departed[r].ok()) {
      return absl::UnavailableError(absl::StrCat("dist_sync round ", round, " of key ", key_id,
                                                 " cannot complete: ", departed[r].message()));
    }
  }
  return absl::OkStatus();
}

void ServerStore::Push(Session* s, uint64_t id, const ArrayChunk& header,
                       std::vector<std::string> pieces) {
  AcceptPush(s, id, header, std::move(pieces), /*then_pull=*/false);
}

void ServerStore::PushPull(Session* s, uint64_t id, const ArrayChunk& header,
                           std::vector<std::string> pieces) {
  AcceptPush(s, id, header, std::move(pieces), /*then_pull=*/true);
}

void ServerStore::AcceptPush(Session* s, uint64_t id, const ArrayChunk& sent_header,
                             std::vector<std::string> pieces, bool then_pull) {
  auto fail = [&](absl::Status status) { s->send_({ErrorReply(id, status)}); };
  ArrayChunk header = sent_header;  // without its data (RequestAssembler)
  std::string packed;  // a compressed push as sent, for the backup (ReplicatePushes)
  if (header.compressed()) {
    if (absl::Status st = Decompress(&header, &pieces, &packed); !st.ok()) return fail(st);
  }
  ReaderLock lock(&mu_);
  if (absl::Status st = CheckSession(s); !st.ok()) return fail(st);
  absl::StatusOr<Key*> found = FindKey("push", header);
  if (!found.ok()) return fail(found.status());
  Key& key = **found;
  MutexLock key_lock(&key.mu);
  const int rank = s->rank_;
  const bool shared = header.in_shared_memory();
  if (shared && !key.shared.has_value()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "push of key ", header.key(), " in shared memory: server ", options_.server_index,
        " does not share the key (MapKey says which it does)")));
  }
  if (shared) {
    metrics_.push_bytes.Increment(static_cast<double>(key.shape.Size()) * sizeof(float));
  }
  if (const uint64_t seq = header.seq(); seq > 0) {
    if (seq <= key.taken[rank]) {
      return AnswerResent(s, id, header.key(), key, seq, then_pull, shared);
    }
    if (seq > key.taken[rank] + 1 && options_.view > 0) {
      // A copy taken over that misses pushes the lost primary had applied (it lost its backup
      // before it was lost itself): UNAVAILABLE, as the job must resume from its checkpoint.
      return fail(absl::UnavailableError(absl::StrCat(
          "push of key ", header.key(), " is worker ", rank, "'s push number ", seq,
          ", but the copy of server ", options_.server_index, "'s keys taken over in view ",
          options_.view, " holds ", key.taken[rank],
          " of them: the lost server went on without its backup, so no complete copy is left")));
    }
    if (seq > key.taken[rank] + 1) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "push of key ", header.key(), " is worker ", rank, "'s push number ", seq,
          ", but server ", options_.server_index, " has taken ", key.taken[rank],
          " of its pushes of the key: one between them was lost")));
    }
  }
  if (!sync()) {
    CopyPieces(Payload(key, rank, std::move(pieces), shared).views(),
               static_cast<char*>(key.merged.data().dptr));
    const uint64_t taken = key.taken[rank];
    if (header.seq() > 0) key.taken[rank] = header.seq();  // taken once applied
    ++key.version;
    ++key.pushes;
    std::optional<NDArray> fresh;
    if (!ReplicatePushes(header.key(), key, 0, {{rank, &packed}})) {
      fresh = LendMerged(header.key(), key, 0);
    }
    absl::Status applied = Apply(header.key(), key, key.merged);
    if (fresh.has_value()) key.merged = *std::move(fresh);  // the lent one is the link's now
    if (!applied.ok()) {
      key.taken[rank] = taken;
      --key.version;
      --key.pushes;
      Diverged(header.key(), applied);
      return fail(applied);
    }
    return AnswerAsyncPush(s, id, header.key(), key, then_pull, shared);
  }
  std::vector<char> joined = Joined(key);
  joined[rank] = 1;
  if (absl::Status st =
          RoundBlocked(header.key(), key.round.rounds_done() + 1, joined, members_.departed());
      !st.ok()) {
    return fail(st);
  }
  if (key.round.pushed(rank)) {  // already in this round: waits for the next
    const uint64_t bytes = shared ? 0 : static_cast<uint64_t>(key.shape.Size()) * sizeof(float);
    if (absl::Status st = CheckWaitingBound(s, header.key(), id, bytes); !st.ok()) return fail(st);
    ++s->waiting_;
    s->parked_bytes_ += bytes;
    if (header.seq() > 0) key.taken[rank] = header.seq();
    key.parked.push_back({Waiter{s, id}, rank, header.seq(), std::move(pieces),
                          std::move(packed), bytes, then_pull, shared});
    return;
  }
  if (then_pull) {
    if (absl::Status st = CheckWaitingBound(s, header.key(), id, 0); !st.ok()) return fail(st);
  }
  AcceptSyncPush(key, rank, std::move(pieces), std::move(packed), shared);
  if (header.seq() > 0) {
    key.taken[rank] = header.seq();
    key.in_round[rank] = {header.seq(), key.round.rounds_of(rank)};
  }
  if (then_pull) {
    ++s->waiting_;
    key.pulls.push_back({Waiter{s, id}, rank, key.round.rounds_of(rank), shared});
  } else {
    AckWhenReplicated(s, id, header.key(), key, key.round.rounds_of(rank));
  }
  if (absl::Status st = MaybeCompleteRound(header.key(), key); !st.ok()) {
    // Not this push's fault: the round's pulls get the error (MaybeCompleteRound sent it).
  }
}

void ServerStore::AnswerResent(Session* s, uint64_t id, int key_id, Key& key, uint64_t seq,
                               bool then_pull, bool shared) {
  const int rank = s->rank_;
  // As the first: once the backup holds the value it went into (at the latest, this one).
  if (!sync()) return AnswerAsyncPush(s, id, key_id, key, then_pull, shared);
  if (!then_pull) {
    // Its round: the newest in-round push's, or (an older push) one already done.
    const Key::InRound& in = key.in_round[rank];
    return AckWhenReplicated(s, id, key_id, key,
                             seq == in.seq ? in.round : key.round.rounds_done());
  }
  if (seq != key.in_round[rank].seq) {
    // An earlier push, whose round's value is gone, or one still parked: a worker resends
    // only its last push, and only on a new stream (where nothing of the old one is parked).
    return s->send_({ErrorReply(
        id, absl::FailedPreconditionError(absl::StrCat(
                "push_pull of key ", key_id, ": worker ", rank, "'s push number ", seq,
                " was taken already, and server ", options_.server_index,
                " cannot answer it with its round's value (pull the key)")))});
  }
  if (absl::Status st = CheckWaitingBound(s, key_id, id, 0); !st.ok()) {
    return s->send_({ErrorReply(id, st)});
  }
  ++s->waiting_;
  key.pulls.push_back({Waiter{s, id}, rank, key.in_round[rank].round, shared});
  ServePulls(key_id, key);
}

void ServerStore::AnswerAsyncPush(Session* s, uint64_t id, int key_id, Key& key, bool then_pull,
                                  bool shared) {
  if (Replicated(key, key.version)) {
    return s->send_(then_pull ? PullReply(id, key_id, key, s->rank_, shared)
                              : std::vector<ServerMessage>{OkReply(id)});
  }
  // Answered once the backup holds it (the push is applied: past the waiting bound).
  ++s->waiting_;
  key.pulls.push_back({Waiter{s, id}, s->rank_, key.version, shared, /*ack_only=*/!then_pull});
}

void ServerStore::DropParked(Key& key, const Session* of, const absl::Status& why) {
  std::erase_if(key.parked, [&](const ParkedPush& p) {
    if (of != nullptr && p.waiter.session != of) return false;
    if (p.seq > 0) key.taken[p.rank] = std::min(key.taken[p.rank], p.seq - 1);
    if (!why.ok()) Answer(p, {ErrorReply(p.waiter.id, why)});
    return true;
  });
}

void ServerStore::AcceptSyncPush(Key& key, int rank, std::vector<std::string> pieces,
                                 std::string packed, bool shared) {
  if (!key.round.open()) key.round_opened = options_.clock();
  key.packed[rank] = Sending() ? std::move(packed) : std::string();  // else none will send it
  key.round.Accept(rank, Payload(key, rank, std::move(pieces), shared),
                   static_cast<float*>(key.merged.data().dptr));
}

std::vector<char> ServerStore::Joined(const Key& key) const {
  std::vector<char> joined = members_.InBarrier();
  for (int r = 0; r < options_.num_workers; ++r) joined[r] |= key.round.pushed(r);
  return joined;
}

absl::Status ServerStore::MaybeCompleteRound(int key_id, Key& key) {
  if (!key.round.Ready(members_.InBarrier(), static_cast<float*>(key.merged.data().dptr))) {
    return absl::OkStatus();
  }
  ++key.version;
  key.pushes += static_cast<uint64_t>(key.round.pushed_count());
  if (members_.replaces_workers()) {
    const char* value = static_cast<const char*>(key.value.data().dptr);
    key.previous.assign(value, value + key.shape.Size() * sizeof(float));
    key.previous_round = key.round.rounds_done() + 1;
  }
  std::vector<std::pair<int, const std::string*>> pushes;
  for (int r = 0; r < options_.num_workers; ++r) {
    if (key.round.pushed(r)) pushes.emplace_back(r, &key.packed[r]);
  }
  std::optional<NDArray> fresh;
  if (!ReplicatePushes(key_id, key, key.round.rounds_done() + 1, pushes)) {
    fresh = LendMerged(key_id, key, key.round.rounds_done() + 1);
  }
  for (std::string& packed : key.packed) packed.clear();  // the round is summed
  absl::Status applied = Apply(key_id, key, key.merged);
  if (fresh.has_value()) key.merged = *std::move(fresh);  // the lent one is the link's now
  if (!applied.ok()) {
    // The value is unchanged; the round's pulls learn why.
    --key.version;
    key.pushes -= static_cast<uint64_t>(key.round.pushed_count());
    Diverged(key_id, applied);
    key.round.Abandon();
    applied = absl::InternalError(absl::StrCat("update of key ", key_id, " on server ",
                                               options_.server_index, ": ", applied.message()));
    for (const PendingPull& p : key.pulls) Answer(p, {ErrorReply(p.waiter.id, applied)});
    key.pulls.clear();
    return applied;
  }
  key.round.Finish();
  metrics_.rounds.Increment();
  metrics_.round_seconds.Observe(
      absl::ToDoubleSeconds(options_.clock() - key.round_opened));
  ServePulls(key_id, key);
  // Pushes parked for this (now finished) round open the next one.
  std::deque<ParkedPush> parked = std::move(key.parked);
  key.parked.clear();
  for (ParkedPush& p : parked) {
    if (key.round.pushed(p.rank)) {
      key.parked.push_back(std::move(p));
      continue;
    }
    AcceptSyncPush(key, p.rank, std::move(p.pieces), std::move(p.packed), p.shared);
    if (p.seq > 0) key.in_round[p.rank] = {p.seq, key.round.rounds_of(p.rank)};
    if (!p.then_pull && (!has_backup_ || backup_lost_.load())) {
      Answer(p, {OkReply(p.waiter.id)});
      continue;
    }
    // Still waiting, now for its round (a push_pull's value, or a push's acknowledgement
    // once the round is on the backup): only its bytes are released.
    p.waiter.session->parked_bytes_ -= p.bytes;
    key.pulls.push_back({p.waiter, p.rank, key.round.rounds_of(p.rank), p.shared,
                         /*ack_only=*/!p.then_pull});
  }
  return MaybeCompleteRound(key_id, key);
}

std::vector<ServerMessage> ServerStore::PullReply(uint64_t id, int key_id, const Key& key, int rank,
                                                  bool shared) {
  return PullReply(id, key_id, key, rank, shared, static_cast<const char*>(key.value.data().dptr));
}

std::vector<ServerMessage> ServerStore::RejoinPullReply(int key_id, const Key& key,
                                                        const PendingPull& p) {
  const int64_t done = key.round.rounds_done();
  if (done == p.before_round - 1) return PullReply(p.waiter.id, key_id, key, p.rank, p.shared);
  if (done == p.before_round && key.previous_round == p.before_round) {
    return PullReply(p.waiter.id, key_id, key, p.rank, p.shared, key.previous.data());
  }
  return {ErrorReply(p.waiter.id, absl::FailedPreconditionError(absl::StrCat(
      "pull of key ", key_id, " for worker ", p.rank, "'s replacement: it needs the value before "
      "round ", p.before_round, ", but server ", options_.server_index, " has done ", done,
      " rounds and keeps the value before round ", key.previous_round)))};
}

std::vector<ServerMessage> ServerStore::PullReply(uint64_t id, int key_id, const Key& key, int rank,
                                                  bool shared, const char* data) {
  const int64_t n = key.shape.Size();
  const uint64_t total = static_cast<uint64_t>(n) * sizeof(float);
  const bool bf16 = compression_.has_value() && internal::PullsInBFloat16(*compression_);
  ArrayChunk header;  // what every chunk repeats
  header.set_key(key_id);
  header.set_dtype(DT_FLOAT32);
  for (int64_t d : key.shape.dims()) header.add_shape(d);
  if (shared) {
    metrics_.pull_bytes.Increment(static_cast<double>(total));
    float* slot = reinterpret_cast<float*>(key.shared->slot(rank));
    if (bf16) {
      internal::RoundPull(reinterpret_cast<const float*>(data), n, slot);
    } else {
      std::memcpy(slot, data, total);
    }
    ServerMessage reply = OkReply(id);
    *reply.mutable_pull() = std::move(header);
    reply.mutable_pull()->set_last(true);
    reply.mutable_pull()->set_in_shared_memory(true);
    return {std::move(reply)};
  }
  if (!bf16) {
    metrics_.pull_bytes.Increment(static_cast<double>(total));
    return ChunkedReply(id, header, data, total);
  }
  // Packed straight into the chunks (bfloat16 bytes [offset, offset + n) are values
  // [offset / 2, (offset + n) / 2)).
  const uint64_t packed = static_cast<uint64_t>(n) * sizeof(BFloat16);
  metrics_.pull_bytes.Increment(static_cast<double>(packed));
  header.set_dtype(DT_BFLOAT16);
  const auto* values = reinterpret_cast<const float*>(data);
  return ChunkedReply(id, header, packed, [values](ArrayChunk* chunk, uint64_t offset, uint64_t bytes) {
    std::string* out = chunk->mutable_data();
    out->resize(bytes);
    internal::PackPull(values + offset / sizeof(BFloat16), static_cast<int64_t>(bytes / sizeof(BFloat16)),
                       out->data());
  });
}

std::vector<ServerMessage> ServerStore::ChunkedReply(uint64_t id, const ArrayChunk& header,
                                                     const char* data, uint64_t total) const {
  return ChunkedReply(id, header, total, [data](ArrayChunk* chunk, uint64_t offset, uint64_t n) {
    chunk->set_data(data + offset, n);
  });
}

std::vector<ServerMessage> ServerStore::ChunkedReply(uint64_t id, const ArrayChunk& header,
                                                     uint64_t total, ChunkFill fill) const {
  std::vector<ServerMessage> replies;
  // Whole values in every chunk (the worker widens bfloat16 chunks one at a time).
  const uint64_t step = std::max<uint64_t>(4, options_.max_chunk_bytes / 4 * 4);
  uint64_t offset = 0;
  do {
    const uint64_t n = std::min(step, total - offset);
    ServerMessage& reply = replies.emplace_back(OkReply(id));
    ArrayChunk* chunk = reply.mutable_pull();
    *chunk = header;
    chunk->set_offset(offset);
    fill(chunk, offset, n);
    offset += n;
    chunk->set_last(offset == total);
  } while (offset < total);
  return replies;
}

void ServerStore::ServePulls(int key_id, Key& key) {
  const absl::Status blocked =
      key.round.open()
          ? RoundBlocked(key_id, key.round.rounds_done() + 1, Joined(key), members_.departed())
          : absl::OkStatus();
  std::vector<PendingPull> waiting;
  for (PendingPull& p : key.pulls) {
    if (Ready(key, p)) {
      Answer(p, p.ack_only             ? std::vector<ServerMessage>{OkReply(p.waiter.id)}
                : p.before_round > 0 ? RejoinPullReply(key_id, key, p)
                                     : PullReply(p.waiter.id, key_id, key, p.rank, p.shared));
    } else if (!blocked.ok()) {
      Answer(p, {ErrorReply(p.waiter.id, blocked)});
    } else {
      waiting.push_back(p);
    }
  }
  key.pulls = std::move(waiting);
}

bool ServerStore::Ready(const Key& key, const PendingPull& p) const {
  if (!sync()) return Replicated(key, p.round);
  if (p.before_round > 0) {
    // The value before that round: the one that round's pushes were computed from, on the
    // backup once it is no longer the newest.
    const int64_t done = key.round.rounds_done();
    return done >= p.before_round ||
           (done == p.before_round - 1 && Replicated(key, key.version));
  }
  return key.round.rounds_done() >= p.round && Replicated(key, key.version);
}

void ServerStore::Pull(Session* s, uint64_t id, const PullRequest& pull) {
  ReaderLock lock(&mu_);
  auto fail = [&](absl::Status status) { s->send_({ErrorReply(id, status)}); };
  if (absl::Status st = CheckSession(s); !st.ok()) return fail(st);
  absl::StatusOr<Key*> found = LookUp("pull", pull.key());
  if (!found.ok()) return fail(found.status());
  Key& key = **found;
  MutexLock key_lock(&key.mu);
  const bool shared = pull.into_shared_memory();
  if (shared && !key.shared.has_value()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "pull of key ", pull.key(), " into shared memory: server ", options_.server_index,
        " does not share the key (MapKey says which it does)")));
  }
  // dist_async: the value as it is once its Init is on the backup.
  PendingPull pending{Waiter{s, id}, s->rank_, sync() ? key.round.rounds_of(s->rank_) : 0,
                      shared};
  if (pull.has_after_push() && sync()) {
    // A replacement: what its predecessor pulled after push number after_push. When that one
    // had pushed the next number too, the value before the round it went into.
    const uint64_t taken = key.taken[s->rank_];
    const Key::InRound& in = key.in_round[s->rank_];
    if (taken == pull.after_push() + 1 && in.seq == taken) {
      pending.before_round = in.round;
    } else if (taken > pull.after_push()) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "pull of key ", pull.key(), " after worker ", s->rank_, "'s push number ",
          pull.after_push(), ": server ", options_.server_index, " has taken ", taken,
          " of its pushes of the key")));
    }
  }
  if (Ready(key, pending)) {
    return s->send_(pending.before_round > 0
                        ? RejoinPullReply(pull.key(), key, pending)
                        : PullReply(id, pull.key(), key, s->rank_, shared));
  }
  if (absl::Status st = CheckWaitingBound(s, pull.key(), id, 0); !st.ok()) return fail(st);
  ++s->waiting_;
  key.pulls.push_back(pending);
  ServePulls(pull.key(), key);  // fails it at once if a departed worker blocks its round
}

void ServerStore::Barrier(Session* s, uint64_t id) {
  WriterLock lock(&mu_);
  if (absl::Status st = CheckSession(s); !st.ok()) return s->send_({ErrorReply(id, st)});
  if (absl::Status st = members_.EnterBarrier(s->rank_, id, options_.clock()); !st.ok()) {
    return s->send_({ErrorReply(id, st)});
  }
  // Join: rounds the others finish while this worker waits complete without it.
  if (sync()) {
    for (auto& [key_id, key] : keys_) (void)MaybeCompleteRound(key_id, key);
  }
  if (!members_.barrier_full()) return;
  for (auto& [key_id, key] : keys_) key.round.AlignRanks();
  AnswerBarrier(absl::OkStatus());
}

void ServerStore::AnswerBarrier(const absl::Status& status) {
  for (const auto& [rank, id] : members_.TakeBarrier(/*opened=*/status.ok())) {
    sessions_[rank]->send_({status.ok() ? OkReply(id) : ErrorReply(id, status)});
  }
}

void ServerStore::Leave(Session* s, const absl::Status& why) {
  WriterLock lock(&mu_);
  const int rank = s->rank_;
  if (rank < 0 || sessions_[rank] != s) return;
  sessions_[rank] = nullptr;
  const absl::Status left =
      members_.Depart(rank, s->leaving_ ? "it left the job" : why.message(), s->leaving_);
  for (auto& [key_id, key] : keys_) {
    std::erase_if(key.pulls, [&](const PendingPull& p) { return p.waiter.session == s; });
    // Dropped unanswered: the worker is gone (it may send them again on a new stream).
    DropParked(key, s, absl::OkStatus());
  }
  // A job that replaces lost workers waits for this rank's replacement (until the deadline).
  if (sync() && !left.ok()) FailBlockedBy(rank, left);
}

void ServerStore::FailBlockedBy(int rank, const absl::Status& why) {
  for (auto& [key_id, key] : keys_) {
    if (key.round.open() && !key.round.pushed(rank)) {
      ServePulls(key_id, key);
      const absl::Status blocked = absl::UnavailableError(absl::StrCat(
          "dist_sync round ", key.round.rounds_done() + 1, " of key ", key_id,
          " cannot complete: ", why.message()));
      DropParked(key, nullptr, blocked);
    }
  }
  if (members_.barrier_waiting()) {
    AnswerBarrier(absl::UnavailableError(absl::StrCat("barrier cannot complete: ", why.message())));
  }
}

void ServerStore::Answer(const PendingPull& p, std::vector<ServerMessage> replies) {
  --p.waiter.session->waiting_;
  Reply(p.waiter, std::move(replies));
}

void ServerStore::Answer(const ParkedPush& p, std::vector<ServerMessage> replies) {
  --p.waiter.session->waiting_;
  p.waiter.session->parked_bytes_ -= p.bytes;
  Reply(p.waiter, std::move(replies));
}

absl::Status ServerStore::CheckWaitingBound(const Session* s, int key_id, uint64_t id,
                                            uint64_t parked_bytes) const {
  if (s->waiting_.load() >= options_.max_session_waiting_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key ", key_id, ": request ", id, " would be this worker's request number ",
                     s->waiting_.load() + 1, " waiting for a round; server ", options_.server_index,
                     " holds at most ", options_.max_session_waiting_requests));
  }
  // Read on the session's own thread: its assembler is its own.
  const uint64_t held = s->assembler_.bytes() + s->parked_bytes_.load() + parked_bytes;
  if (parked_bytes > 0 && held > options_.max_session_staged_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key ", key_id, ": parking push ", id,
                     " for the next round would take this worker's requests being received "
                     "or parked to ",
                     held, " bytes; server ", options_.server_index, " holds at most ",
                     options_.max_session_staged_bytes, " per worker"));
  }
  return absl::OkStatus();
}

void ServerStore::WatchDeadlines() {
  const absl::Duration tick = std::min(absl::Seconds(1), options_.round_timeout / 4);
  MutexLock watchdog_lock(&watchdog_mu_);
  while (true) {
    // A tick, or until stopping_.
    const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(tick);
    while (!stopping_) {
      if (!watchdog_cv_.WaitUntil(&watchdog_mu_, deadline)) break;
    }
    if (stopping_) return;
    MutexUnlock unlocked(&watchdog_mu_);
    CheckDeadlines();
    ResyncBackup();
  }
}

void ServerStore::CheckDeadlines() {
  const absl::Time now = options_.clock();
  bool barrier_overdue = false;
  {
    ReaderLock lock(&mu_);
    FailOverdueRounds(now);
    barrier_overdue = members_.BarrierOverdue(now, options_.round_timeout);
  }
  if (barrier_overdue) {
    WriterLock lock(&mu_);
    FailOverdueBarrier(now);
  }
}

// Why a round or barrier still misses the ranks not in `arrived`.
static std::string MissingRanks(const std::vector<char>& arrived, absl::Duration timeout) {
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(arrived.size()); ++r) {
    if (!arrived[r]) ranks.push_back(r);
  }
  return absl::StrCat(ranks.size() == 1 ? "worker " : "workers ", absl::StrJoin(ranks, ", "),
                      " sent nothing within ", absl::FormatDuration(timeout), " (--round_timeout)");
}

void ServerStore::FailOverdueRounds(absl::Time now) {
  if (!sync()) return;
  for (auto& [key_id, key] : keys_) {
    MutexLock key_lock(&key.mu);
    if (!key.round.open() || now - key.round_opened < options_.round_timeout) continue;
    const std::vector<char> arrived = Joined(key);
    const absl::Status overdue = absl::DeadlineExceededError(absl::StrCat(
        "server ", options_.server_index, ": dist_sync round ", key.round.rounds_done() + 1,
        " of key ", key_id, " cannot complete: ", MissingRanks(arrived, options_.round_timeout)));
    // Not `key` in the lambda: clang 14 cannot capture a structured binding.
    const int64_t done = key.round.rounds_done();
    std::erase_if(key.pulls, [&](const PendingPull& p) {
      if (p.round <= done) return false;
      Answer(p, {ErrorReply(p.waiter.id, overdue)});
      return true;
    });
    DropParked(key, nullptr, overdue);
  }
}

void ServerStore::FailOverdueBarrier(absl::Time now) {
  // Checked again: the barrier may have opened or been answered since the shared look.
  if (!sync() || !members_.BarrierOverdue(now, options_.round_timeout)) return;
  AnswerBarrier(absl::DeadlineExceededError(
      absl::StrCat("server ", options_.server_index, ": barrier cannot complete: ",
                   MissingRanks(members_.InBarrier(), options_.round_timeout))));
}

int ServerStore::connected_workers() const {
  ReaderLock lock(&mu_);
  return members_.connected_count();
}

absl::StatusOr<CommandReply> ServerStore::Command(const CommandRequest& request) {
  CommandReply reply;
  {
    // One job's trainer must not change another's optimizer or read its state.
    ReaderLock lock(&mu_);
    const bool connected = members_.connected_count() > 0;
    if (!connected || request.job_id() != members_.job_id()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "server ", options_.server_index, " ",
          connected ? absl::StrCat("serves job '", members_.job_id(), "'")
                    : std::string("runs no job"),
          "; a command of job '", request.job_id(), "' is refused"));
    }
  }
  switch (request.command_case()) {
    case CommandRequest::kSetOptimizer: {
      const OptimizerSpec& spec = request.set_optimizer();
      {
        // Every worker sends the trainer's optimizer; copies of the one running change nothing.
        ReaderLock lock(&mu_);
        if (optimizer_ != nullptr &&
            google::protobuf::util::MessageDifferencer::Equals(spec, optimizer_spec_)) {
          return reply;
        }
      }
      ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(spec));
      WriterLock lock(&mu_);
      optimizer_ = std::move(optimizer);
      optimizer_spec_ = spec;
      ReplicateOptimizer();  // before any update it applies
      return reply;
    }
    case CommandRequest::kSaveOptimizerState: {
      // Exclusively: no update runs while the state is read.
      WriterLock lock(&mu_);
      if (optimizer_ == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "server ", options_.server_index, " has no optimizer whose state to save"));
      }
      ASSIGN_OR_RETURN(*reply.mutable_state(), optimizer_->SaveState());
      return reply;
    }
    case CommandRequest::kLoadOptimizerState: {
      WriterLock lock(&mu_);
      if (optimizer_ == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "server ", options_.server_index, " has no optimizer to load a state into"));
      }
      RETURN_IF_ERROR(optimizer_->LoadState(rt_, request.load_optimizer_state()));
      // The backup's copy has no updates to replay into that state: it gets every key whole.
      for (auto& [key_id, key] : keys_) {
        Replicate(key_id, key, key.value, key.round.rounds_done(), /*snapshot=*/true);
      }
      return reply;
    }
    case CommandRequest::kRoundCounters: {
      ReaderLock lock(&mu_);
      for (auto& [key_id, key] : keys_) {
        MutexLock key_lock(&key.mu);
        KeyCounters& counters = *reply.add_counters();
        counters.set_server_index(options_.server_index);
        counters.set_key(key_id);
        counters.set_version(static_cast<uint64_t>(key.version));
        counters.set_pushes(key.pushes);
        counters.mutable_taken()->Add(key.taken.begin(), key.taken.end());
      }
      return reply;
    }
    default:
      return absl::InvalidArgumentError("the command request names no command");
  }
}

}  // namespace tessera::kvstore

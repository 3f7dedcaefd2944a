#include "server/replica_link.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kvstore/internal/replica_store.h"
#include "kvstore/transport.h"
#include "rpc/channel.h"
#include "rpc/message_limits.h"

namespace tessera::server {

GrpcReplicaLink::GrpcReplicaLink(Options options)
    : options_(std::move(options)), writer_([this] { WriteLoop(); }) {}

GrpcReplicaLink::~GrpcReplicaLink() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    if (open_ != nullptr) open_->context.TryCancel();  // unblocks a write to a stalled backup
    cv_.SignalAll();
  }
  writer_.join();
}

void GrpcReplicaLink::Send(ReplicaMessage update, Payload payload, Done done) {
  MutexLock lock(&mu_);
  queue_.push_back({std::move(update), std::move(payload), std::move(done)});
  cv_.SignalAll();
}

absl::StatusOr<std::unique_ptr<GrpcReplicaLink::Stream>> GrpcReplicaLink::Open() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   rpc::NewChannel({.target = options_.target,
                                    .security = options_.security,
                                    .limits = rpc::kKVStoreLimits.Peer(),
                                    .own_connection = true}));
  // The first time the backup may still be starting; once it served, a refused connection
  // means it is gone, and the updates waiting fail soon.
  const absl::Duration timeout = connected_once_ ? absl::Seconds(2) : options_.connect_timeout;
  RETURN_IF_ERROR(rpc::WaitUntilConnected(
      *channel, absl::StrCat("backup ", options_.target), timeout, [this] {
        MutexLock lock(&mu_);
        return stopping_;
      }));
  auto stream = std::make_unique<Stream>();
  stream->channel = channel;
  const grpc::internal::RpcMethod method("/tessera.KVStoreService/Replicate",
                                         grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  stream->stream.reset(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, ReplicaAck>::Create(
          channel.get(), method, &stream->context));
  connected_once_ = true;
  return stream;
}

grpc::Status GrpcReplicaLink::Close(std::unique_ptr<Stream> stream, bool cancel) {
  {
    MutexLock lock(&mu_);
    open_ = nullptr;
  }
  if (cancel) stream->context.TryCancel();
  const grpc::Status status = stream->stream->Finish();
  stream->reader.join();
  return status;
}

void GrpcReplicaLink::FailInFlight(const grpc::Status& finished) {
  absl::Status why;
  std::deque<std::pair<uint64_t, Done>> failed;
  {
    MutexLock lock(&mu_);
    why = !broke_because_.ok() ? broke_because_
          : !finished.ok()     ? kvstore::FromGrpcStatus(finished,
                                                         absl::StrCat("backup ", options_.target))
                               : absl::UnavailableError(absl::StrCat(
                                     "the Replicate stream to backup ", options_.target, " ended"));
    broke_because_ = absl::OkStatus();
    failed.swap(in_flight_);
  }
  for (auto& [id, done] : failed) done(why);
}

void GrpcReplicaLink::WriteLoop() {
  std::unique_ptr<Stream> stream;
  uint64_t next_id = 1;
  MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && queue_.empty() && !(stream != nullptr && broken_)) cv_.Wait(&mu_);
    if (stopping_) break;
    if (stream != nullptr && broken_) {
      // Finished by the backup (or the connection): its status says why, for what was in
      // flight.
      MutexUnlock unlocked(&mu_);
      FailInFlight(Close(std::move(stream), /*cancel=*/false));
      continue;
    }
    if (stream == nullptr) {
      absl::StatusOr<std::unique_ptr<Stream>> opened;
      {
        MutexUnlock unlocked(&mu_);
        opened = Open();
      }
      if (stopping_) break;
      if (!opened.ok()) {
        // Every update waiting now fails alike, rather than each after its own timeout.
        std::deque<Queued> failed = std::move(queue_);
        queue_.clear();
        MutexUnlock unlocked(&mu_);
        for (Queued& q : failed) q.done(opened.status());
        continue;
      }
      stream = *std::move(opened);
      broken_ = false;
      open_ = stream.get();
      stream->reader = std::thread([this, s = stream.get()] { ReadLoop(s); });
    }
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    const uint64_t id = next_id++;
    in_flight_.emplace_back(id, std::move(next.done));
    MutexUnlock unlocked(&mu_);
    const std::string_view bytes = next.payload.bytes;
    for (kvstore::ReplicaChunk& c : kvstore::PlanReplicaChunks(
             std::move(next.update), bytes.size(), id, options_.max_chunk_bytes)) {
      // A failed write: the stream ended; the reader says so, and this loop closes it.
      if (!stream->stream->Write(kvstore::EncodeReplicaChunk(
              std::move(c.message), bytes.data() + c.offset, c.size, next.payload.owner))) {
        break;
      }
    }
  }
  MutexUnlock unlocked(&mu_);
  if (stream != nullptr) (void)Close(std::move(stream), /*cancel=*/true);
}

void GrpcReplicaLink::ReadLoop(Stream* stream) {
  ReplicaAck ack;
  absl::Status why;  // a broken protocol; else the stream's own status says why it ended
  while (stream->stream->Read(&ack)) {
    Done done;
    {
      MutexLock lock(&mu_);
      if (in_flight_.empty() || in_flight_.front().first != ack.id()) {
        why = absl::InternalError(absl::StrCat("backup ", options_.target,
                                               " acknowledged update ", ack.id(),
                                               ", which is not the next one awaited"));
        stream->context.TryCancel();
        break;
      }
      done = std::move(in_flight_.front().second);
      in_flight_.pop_front();
    }
    done(absl::Status(static_cast<absl::StatusCode>(ack.code()),
                      absl::StrCat("backup ", options_.target, ": ", ack.message())));
  }
  MutexLock lock(&mu_);
  broken_ = true;
  broke_because_ = why;
  cv_.SignalAll();
}

}  // namespace tessera::server

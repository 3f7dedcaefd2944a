#include "server/kvstore_service.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "spdlog/spdlog.h"
#include "kvstore/transport.h"
#include "rpc/write_queue.h"

namespace tessera::server {
namespace {

// A bidirectional stream whose reads are handled as they arrive (the store never blocks on a
// peer) and whose replies, which may come from any thread, are queued and written by
// priority, in order within one.
// OnMessage handles one read; OnEnd runs once the peer's side ends (or the stream breaks).
template <typename In, typename Out>
class QueuedReactor : public grpc::ServerBidiReactor<In, Out> {
 public:
  void OnReadDone(bool ok) override {
    if (ok) {
      OnMessage(in_);
      this->StartRead(&in_);
      return;
    }
    // The peer closed its side, went away, or the stream was cancelled.
    OnEnd();
    MutexLock lock(&mu_);
    read_done_ = true;
    MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    if (!ok) {
      queue_.Clear();  // the stream is broken; the failed read will finish it
      write_failed_ = true;
    }
    writing_ = false;
    StartNextWriteLocked();
    MaybeFinishLocked();
  }

 protected:
  // Call last in the derived constructor.
  void StartReading() { this->StartRead(&in_); }
  virtual void OnMessage(In& message) = 0;
  virtual void OnEnd() = 0;

  void Enqueue(std::vector<Out> replies, int priority = 0) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (read_done_ || write_failed_) return;
    for (Out& r : replies) queue_.Push(std::move(r), priority);
    StartNextWriteLocked();
  }

 private:
  void StartNextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || write_failed_ || queue_.empty()) return;
    current_ = queue_.Pop();
    writing_ = true;
    this->StartWrite(&current_);
  }
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (read_done_ && !writing_ && !finished_) {
      finished_ = true;
      this->Finish(grpc::Status::OK);
    }
  }

  In in_;  // only touched by the read callbacks, which never overlap
  Mutex mu_;
  rpc::WriteQueue<Out> queue_ ABSL_GUARDED_BY(mu_);
  Out current_ ABSL_GUARDED_BY(mu_);  // being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// One worker stream, as a ServerStore::Session of the store its Hello asks for (the node's
// own, or one it took over in a failover); opened at the first message.
class SessionReactor : public QueuedReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SessionReactor(kvstore::ServerNode* node, std::string peer)
      : node_(node), peer_(std::move(peer)) {
    StartReading();
  }

  void OnDone() override {
    session_.reset();
    store_.reset();
    delete this;
  }

 private:
  void OnMessage(grpc::ByteBuffer& in) override {
    WorkerMessage message;
    if (absl::Status decoded = kvstore::DecodeWorkerMessage(&in, &message); !decoded.ok()) {
      Enqueue({kvstore::EncodeServerMessage(kvstore::ErrorReply(0, decoded))});  // no id: 0
      return;
    }
    if (session_ == nullptr) {
      absl::StatusOr<std::shared_ptr<kvstore::ServerStore>> store =
          message.has_hello() ? node_->StoreFor(message.hello()) : node_->shared_own();
      if (!store.ok()) {
        // Not opened: the worker may say Hello again (a takeover waiting for a majority).
        Enqueue({kvstore::EncodeServerMessage(kvstore::ErrorReply(message.id(), store.status()))});
        return;
      }
      store_ = *std::move(store);
      session_ = store_->Open([this](std::vector<ServerMessage> replies) {
        for (ServerMessage& r : replies) {
          const int priority = ReplyPriority(r);
          Enqueue({kvstore::EncodeServerMessage(std::move(r))}, priority);
        }
      });
    }
    if (message.priority() != 0) {
      MutexLock lock(&priorities_mu_);
      priorities_[message.id()] = message.priority();
    }
    session_->Handle(std::move(message));
  }
  // The priority of the request `reply` answers (forgotten with its last reply).
  int ReplyPriority(const ServerMessage& reply) ABSL_LOCKS_EXCLUDED(priorities_mu_) {
    MutexLock lock(&priorities_mu_);
    auto it = priorities_.find(reply.id());
    if (it == priorities_.end()) return 0;
    const int priority = it->second;
    if (kvstore::IsFinalReply(reply)) priorities_.erase(it);
    return priority;
  }
  void OnEnd() override {
    if (session_ == nullptr) return;
    session_->Close(absl::UnavailableError(absl::StrCat("its stream from ", peer_, " ended")));
  }

  kvstore::ServerNode* const node_;  // not owned
  const std::string peer_;
  // Touched by the read callbacks only (they never overlap) and OnDone after them. The
  // session's store lives at least as long as the session.
  std::shared_ptr<kvstore::ServerStore> store_;
  std::unique_ptr<kvstore::ServerStore::Session> session_;
  Mutex priorities_mu_;
  // Of the requests not answered in full that asked for a priority other than 0.
  absl::flat_hash_map<uint64_t, int> priorities_ ABSL_GUARDED_BY(priorities_mu_);
};

// The Replicate stream of the primary this server backs up.
class ReplicaReactor : public QueuedReactor<ReplicaMessage, ReplicaAck> {
 public:
  explicit ReplicaReactor(kvstore::ServerStore* store) : session_(store->OpenReplicaSession()) {
    StartReading();
  }

  void OnDone() override { delete this; }

 private:
  void OnMessage(ReplicaMessage& in) override {
    if (std::optional<ReplicaAck> ack = session_->Handle(std::move(in))) {
      Enqueue({*std::move(ack)});
    }
  }
  void OnEnd() override {}

  std::unique_ptr<kvstore::ServerStore::ReplicaSession> session_;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KVStoreServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  return new SessionReactor(node_, context->peer());
}

grpc::ServerBidiReactor<ReplicaMessage, ReplicaAck>* KVStoreServiceImpl::Replicate(
    grpc::CallbackServerContext* /*context*/) {
  return new ReplicaReactor(&node_->own());
}

grpc::ServerUnaryReactor* KVStoreServiceImpl::Command(grpc::CallbackServerContext* context,
                                                      const CommandRequest* request,
                                                      CommandReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->command_case() == CommandRequest::kStop) {
    spdlog::info("stop requested by {}", context->peer());
    reactor->Finish(grpc::Status::OK);
    on_stop_();
    return reactor;
  }
  absl::StatusOr<std::shared_ptr<kvstore::ServerStore>> store = node_->StoreFor(*request);
  absl::StatusOr<CommandReply> result =
      store.ok() ? (*store)->Command(*request) : absl::StatusOr<CommandReply>(store.status());
  if (result.ok()) *reply = std::move(*result);
  reactor->Finish(kvstore::ToGrpcStatus(result.status()));
  return reactor;
}

}  // namespace tessera::server

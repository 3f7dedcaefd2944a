#include "server/kvstore_service.h"

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "spdlog/spdlog.h"
#include "kvstore/transport.h"

namespace tessera::server {
namespace {

// One worker stream. Reads are handled as they arrive (the store never blocks on a peer);
// replies, which the store may send from any thread, are queued and written in order.
class SessionReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SessionReactor(kvstore::ServerStore* store, std::string peer) : peer_(std::move(peer)) {
    session_ = store->Open([this](std::vector<ServerMessage> replies) { Enqueue(std::move(replies)); });
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      WorkerMessage message;
      if (absl::Status decoded = kvstore::DecodeWorkerMessage(&in_, &message); decoded.ok()) {
        session_->Handle(std::move(message));
      } else {
        Enqueue({kvstore::ErrorReply(0, decoded)});  // no id to answer: request 0
      }
      StartRead(&in_);
      return;
    }
    // The worker closed its side, went away, or the stream was cancelled.
    session_->Close(absl::UnavailableError(absl::StrCat("its stream from ", peer_, " ended")));
    MutexLock lock(&mu_);
    read_done_ = true;
    MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    queue_.pop_front();
    if (!ok) {
      queue_.clear();  // the stream is broken; the failed read will finish it
      write_failed_ = true;
    }
    writing_ = false;
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
    MaybeFinishLocked();
  }

  void OnDone() override {
    session_.reset();
    delete this;
  }

 private:
  void Enqueue(std::vector<ServerMessage> replies) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (read_done_ || write_failed_) return;
    for (ServerMessage& r : replies) queue_.push_back(kvstore::EncodeServerMessage(std::move(r)));
    if (!writing_ && !queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (read_done_ && !writing_ && !finished_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  const std::string peer_;
  std::unique_ptr<kvstore::ServerStore::Session> session_;
  grpc::ByteBuffer in_;  // only touched by the read callbacks, which never overlap
  Mutex mu_;
  // Front: being written (a deque keeps it in place).
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KVStoreServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  return new SessionReactor(store_, context->peer());
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
  absl::StatusOr<CommandReply> result = store_->Command(*request);
  if (result.ok()) *reply = std::move(*result);
  reactor->Finish(kvstore::ToGrpcStatus(result.status()));
  return reactor;
}

}  // namespace tessera::server

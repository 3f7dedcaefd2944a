#include "kvstore/internal/server_connection.h"

#include <algorithm>
#include <climits>
#include <chrono>
#include <future>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/client_callback.h"
#include "kvstore/transport.h"
#include "rpc/channel.h"
#include "rpc/write_queue.h"

namespace tessera::kvstore::internal {

// Writes grpc::ByteBuffers encoded by kvstore/transport.h (payloads as slices, not copies),
// so it calls the Session method by name rather than through the typed stub.
class ServerConnection::Reactor : public grpc::ClientBidiReactor<grpc::ByteBuffer, ServerMessage> {
 public:
  using Encode = std::function<std::vector<grpc::ByteBuffer>(uint64_t id)>;

  Reactor(const std::shared_ptr<grpc::Channel>& channel, std::string address)
      : address_(std::move(address)),
        method_("/tessera.KVStoreService/Session", grpc::internal::RpcMethod::BIDI_STREAMING,
                channel) {
    grpc::internal::ClientCallbackReaderWriterFactory<grpc::ByteBuffer, ServerMessage>::Create(
        channel.get(), method_, &context_, this);
    StartRead(&in_);
    AddHold();  // writes start from outside the reactions; released when writes are done
    StartCall();
  }

  void Send(const Encode& encode, int priority, OnReply on_reply) ABSL_LOCKS_EXCLUDED(mu_) {
    uint64_t id = 0;
    absl::Status status;  // why the request is refused
    {
      MutexLock lock(&mu_);
      id = next_id_++;
      if (broken_.ok() && !closing_) {
        callbacks_.emplace(id, std::move(on_reply));
        for (grpc::ByteBuffer& m : encode(id)) queue_.Push(std::move(m), priority);
        StartNextWriteLocked();
        return;
      }
      status = broken_.ok() ? absl::FailedPreconditionError("connection closing") : broken_;
    }
    on_reply(ErrorReply(id, status), true);  // callbacks run without mu_ held
  }

  void Abort() { context_.TryCancel(); }

  bool broken() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return !broken_.ok();
  }

  // Starts closing, saying first that the worker leaves on purpose (LeaveRequest: a server
  // then awaits no replacement of it); OnDone follows once the server has finished the stream.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (!closing_ && broken_.ok() && !ended_) {
      WorkerMessage leave;
      leave.set_id(next_id_++);
      leave.mutable_leave();
      // After every request still to be written.
      queue_.PushLast(EncodeWorkerMessage(std::move(leave)));
      StartNextWriteLocked();
    }
    closing_ = true;
    MaybeWritesDoneLocked();
  }

  void WaitDone() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done_) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;
    }
    if (!done_) {
      context_.TryCancel();  // a server that does not finish: cut the stream
      while (!done_) cv_.Wait(&mu_);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The stream ended (server gone, cancelled, keepalive timeout). Release the hold that
      // keeps it open for writes, so OnDone comes and fails whatever is pending.
      MutexLock lock(&mu_);
      ended_ = true;  // no write may start now: OnDone can come at any moment
      ReleaseHoldLocked();
      return;
    }
    OnReply callback;
    const bool done = IsFinalReply(in_);
    {
      MutexLock lock(&mu_);
      auto it = callbacks_.find(in_.id());
      if (it != callbacks_.end()) {
        callback = done ? std::move(it->second) : it->second;
        if (done) callbacks_.erase(it);
      }
    }
    if (callback) callback(in_, done);
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      write_failed_ = true;  // the stream is broken: OnDone fails what is pending
      queue_.Clear();
      return;
    }
    StartNextWriteLocked();
    MaybeWritesDoneLocked();
  }

  void OnDone(const grpc::Status& status) override {
    std::map<uint64_t, OnReply> pending;
    absl::Status broken;
    {
      MutexLock lock(&mu_);
      // A refused token or certificate stays what it is; anything else means the server is
      // gone for this worker.
      const bool refused = status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                           status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
      broken_ = absl::Status(refused ? static_cast<absl::StatusCode>(status.error_code())
                                     : absl::StatusCode::kUnavailable,
                             absl::StrCat("parameter server ", address_, ": stream ended (",
                                          status.ok() ? "closed" : status.error_message(), ")"));
      broken = broken_;
      pending.swap(callbacks_);
      queue_.Clear();
    }
    for (auto& [id, callback] : pending) callback(ErrorReply(id, broken), true);
    MutexLock lock(&mu_);
    done_ = true;
    cv_.SignalAll();
  }

 private:
  void StartNextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || write_failed_ || ended_ || queue_.empty()) return;
    current_ = queue_.Pop();
    writing_ = true;
    StartWrite(&current_);
  }
  void MaybeWritesDoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closing_ && !writes_done_ && !ended_ && !writing_ && queue_.empty()) {
      writes_done_ = true;
      StartWritesDone();
      ReleaseHoldLocked();
    }
  }
  void ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (hold_released_) return;
    hold_released_ = true;
    RemoveHold();
  }

  const std::string address_;
  const grpc::internal::RpcMethod method_;
  grpc::ClientContext context_;
  ServerMessage in_;  // only touched by the read reactions, which never overlap
  mutable Mutex mu_;
  CondVar cv_;  // done_ became true
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  rpc::WriteQueue<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer current_ ABSL_GUARDED_BY(mu_);  // the message being written
  std::map<uint64_t, OnReply> callbacks_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the read side saw the stream end
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

ServerConnection::ServerConnection(std::string address, std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      stub_(KVStoreService::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<ServerConnection>> ServerConnection::Connect(
    const std::string& address, const Hello& hello, absl::Duration timeout,
    const rpc::TransportSecurity& security, const Cancellation* cancellation) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   rpc::NewChannel({.target = address,
                                    .security = security,
                                    .limits = rpc::kKVStoreLimits.Peer(),
                                    .own_connection = true}));
  RETURN_IF_ERROR(rpc::WaitUntilConnected(
      *channel, absl::StrCat("parameter server ", address), timeout,
      [cancellation] { return cancellation != nullptr && cancellation->cancelled(); }));
  std::unique_ptr<ServerConnection> conn(new ServerConnection(address, std::move(channel)));
  conn->reactor_ = new Reactor(conn->channel_, address);
  // A server still serving another job's workers answers UNAVAILABLE (and one that still
  // holds the stream of the worker a replacement replaces, ALREADY_EXISTS): Hello again (on the
  // same stream) until they leave - a rerun's workers reach the servers before every worker
  // of the run it replaces has let go - or until `timeout`.
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(50);
  ServerMessage reply;
  while (true) {
    // Shared: if Hello times out, the callback may still run while `conn` is torn down.
    auto answer = std::make_shared<std::promise<ServerMessage>>();
    std::future<ServerMessage> future = answer->get_future();
    WorkerMessage message;
    *message.mutable_hello() = hello;
    conn->Send({std::move(message)}, 0, [answer](const ServerMessage& reply, bool) {
      answer->set_value(reply);
    });
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    if (future.wait_for(absl::ToChronoNanoseconds(left)) != std::future_status::ready) {
      return absl::DeadlineExceededError(
          absl::StrCat("parameter server ", address, " did not answer Hello within ",
                       absl::FormatDuration(timeout)));
    }
    reply = future.get();
    // A replacement may come before the server has seen its predecessor's stream end.
    const bool busy = (reply.code() == static_cast<int>(absl::StatusCode::kUnavailable) ||
                       (hello.rejoin() &&
                        reply.code() == static_cast<int>(absl::StatusCode::kAlreadyExists))) &&
                      !reply.has_hello();
    const bool cancelled = cancellation != nullptr && cancellation->cancelled();
    if (!busy || cancelled || absl::Now() + pause > deadline) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Seconds(1));
  }
  if (reply.code() != 0) {
    // The server's answer, or the stream's end, which already names the server.
    const std::string name = absl::StrCat("parameter server ", address, ": ");
    return absl::Status(static_cast<absl::StatusCode>(reply.code()),
                        absl::StartsWith(reply.message(), name)
                            ? reply.message()
                            : absl::StrCat(name, reply.message()));
  }
  conn->hello_ = reply.hello();
  return conn;
}

void ServerConnection::Abort() {
  if (reactor_ != nullptr) reactor_->Abort();
}

bool ServerConnection::broken() const { return reactor_ != nullptr && reactor_->broken(); }

ServerConnection::~ServerConnection() {
  if (reactor_ == nullptr) return;
  reactor_->Close();
  reactor_->WaitDone();
  delete reactor_;
}

void ServerConnection::Send(std::vector<WorkerMessage> messages, int priority, OnReply on_reply) {
  reactor_->Send(
      [&messages, priority](uint64_t id) {
        std::vector<grpc::ByteBuffer> encoded;
        for (WorkerMessage& m : messages) {
          m.set_id(id);
          m.set_priority(priority);
          encoded.push_back(EncodeWorkerMessage(std::move(m)));
        }
        return encoded;
      },
      priority, std::move(on_reply));
}

void ServerConnection::SendChunks(std::vector<WorkerMessage> headers,
                                  std::vector<std::pair<const char*, size_t>> payloads,
                                  std::shared_ptr<const void> owner, int priority,
                                  OnReply on_reply) {
  reactor_->Send(
      [&](uint64_t id) {
        std::vector<grpc::ByteBuffer> encoded;
        for (size_t i = 0; i < headers.size(); ++i) {
          headers[i].set_id(id);
          headers[i].set_priority(priority);
          encoded.push_back(EncodeWorkerChunk(std::move(headers[i]), payloads[i].first,
                                              payloads[i].second, owner));
        }
        return encoded;
      },
      priority, std::move(on_reply));
}

absl::StatusOr<CommandReply> ServerConnection::Command(const CommandRequest& request,
                                                       absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  CommandReply reply;
  const grpc::Status status = stub_->Command(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("parameter server ", address_));
  return reply;
}

}  // namespace tessera::kvstore::internal

// ServerConnection: a worker's Session stream to one parameter server (proto/kvstore.proto),
// on gRPC's callback API. Requests are queued by priority (higher first, then in send
// order) and written one message at a time; replies are dispatched by request id.
//
// A request's callback runs once per reply message, on a gRPC thread, and must not block;
// `done` is true on its final reply (an error, a non-pull reply, or a pull's last chunk).
// When the stream ends (server gone, keepalive timeout, shutdown) every pending request gets
// one final UNAVAILABLE reply naming the server, and later sends fail the same way.
//
// Thread safety: Send and Command may be called from any thread.
#ifndef TESSERA_KVSTORE_INTERNAL_SERVER_CONNECTION_H_
#define TESSERA_KVSTORE_INTERNAL_SERVER_CONNECTION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancellation.h"
#include "proto/kvstore.grpc.pb.h"
#include "rpc/transport_security.h"

namespace tessera::kvstore::internal {

class ServerConnection {
 public:
  using OnReply = std::function<void(const ServerMessage& reply, bool done)>;

  // Connects with `security` (retrying until `timeout`: servers may start after their
  // workers), opens the stream and exchanges Hello. UNAVAILABLE / DEADLINE_EXCEEDED naming
  // `address` and why it cannot be reached (e.g. a TLS handshake that failed), or the
  // server's answer to Hello (UNAUTHENTICATED for a missing or wrong token).
  // A `cancellation` (may be null) that fires ends the wait with CANCELLED.
  static absl::StatusOr<std::unique_ptr<ServerConnection>> Connect(
      const std::string& address, const Hello& hello, absl::Duration timeout,
      const rpc::TransportSecurity& security, const Cancellation* cancellation = nullptr);
  // Closes the stream (after the queued messages), waits for it to end.
  ~ServerConnection();

  // Sends one request's messages (their ids are set here) at `priority`.
  void Send(std::vector<WorkerMessage> messages, int priority, OnReply on_reply);
  // The same for Init/Push chunks whose payloads are lent, not copied: headers[i] (an init
  // or push without data) travels with payloads[i]; `owner` keeps that memory alive while
  // gRPC holds it, and the caller keeps its contents unchanged until the reply.
  void SendChunks(std::vector<WorkerMessage> headers,
                  std::vector<std::pair<const char*, size_t>> payloads,
                  std::shared_ptr<const void> owner, int priority, OnReply on_reply);
  // Cuts the stream: every request pending or sent later fails at once (UNAVAILABLE, "stream
  // ended (Cancelled)"). For a job being cancelled while it waits on this server.
  void Abort();
  // Whether the stream has ended: every reply from then on is the end's UNAVAILABLE (or the
  // refused credentials' status), not the server's.
  bool broken() const;
  // The command channel (a unary call).
  absl::StatusOr<CommandReply> Command(const CommandRequest& request, absl::Duration timeout);

  const std::string& address() const { return address_; }
  const HelloReply& hello() const { return hello_; }

 private:
  class Reactor;
  ServerConnection(std::string address, std::shared_ptr<grpc::Channel> channel);

  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<KVStoreService::Stub> stub_;
  Reactor* reactor_ = nullptr;  // owned; deleted after its stream is done
  HelloReply hello_;
};

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_SERVER_CONNECTION_H_

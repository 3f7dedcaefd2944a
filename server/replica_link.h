// GrpcReplicaLink: a primary parameter server's Replicate stream to its backup
// (kvstore/replica_link.h). A writer thread sends the queued updates in order, split into
// chunks; a reader thread matches the backup's acknowledgements to them, in the same order.
// The stream is opened at the first update (waiting up to connect_timeout for the backup to
// come up) and again at the first update after it broke (waiting 2 s). When it breaks, every
// update sent and not yet acknowledged fails with the stream's status (UNAVAILABLE, or why
// the backup refused the stream: a wrong token is UNAUTHENTICATED), naming the backup. A
// frozen backup is noticed by the channel's keepalive (rpc/channel.h).
#ifndef TESSERA_SERVER_REPLICA_LINK_H_
#define TESSERA_SERVER_REPLICA_LINK_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "core/mutex.h"
#include "grpcpp/grpcpp.h"
#include "kvstore/replica_link.h"
#include "proto/kvstore.grpc.pb.h"
#include "rpc/transport_security.h"

namespace tessera::server {

class GrpcReplicaLink : public kvstore::ReplicaLink {
 public:
  struct Options {
    std::string target;  // the backup's address (host:port or unix:PATH)
    rpc::TransportSecurity security;
    absl::Duration connect_timeout = absl::Seconds(30);
    uint64_t max_chunk_bytes = uint64_t{1} << 20;
  };

  explicit GrpcReplicaLink(Options options);
  // Cancels the stream; the `done` of an update not yet acknowledged may run before it
  // returns (with an error), never after.
  ~GrpcReplicaLink() override;

  void Send(ReplicaMessage update, Payload payload, Done done) override ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& peer() const override { return options_.target; }

 private:
  // One open stream and the thread reading its acknowledgements.
  struct Stream {
    std::shared_ptr<grpc::Channel> channel;
    grpc::ClientContext context;
    // Writes encoded messages (kvstore/transport.h), so the value is lent, not copied.
    std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, ReplicaAck>> stream;
    std::thread reader;
  };

  void WriteLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Opens a stream; the error names the backup.
  absl::StatusOr<std::unique_ptr<Stream>> Open();
  void ReadLoop(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `stream` (cancelled first, when `cancel`), joins its reader; the stream's status.
  grpc::Status Close(std::unique_ptr<Stream> stream, bool cancel) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the updates in flight with why the stream ended (`finished`: its status).
  void FailInFlight(const grpc::Status& finished) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  Mutex mu_;
  CondVar cv_;  // an update queued, the stream broke, or stopping_
  struct Queued {
    ReplicaMessage update;
    Payload payload;
    Done done;
  };
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // Updates written to the open stream and not yet acknowledged: their ids, in order.
  std::deque<std::pair<uint64_t, Done>> in_flight_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // the open stream ended
  absl::Status broke_because_ ABSL_GUARDED_BY(mu_);  // a protocol error the reader found
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_once_ = false;  // the writer's
  Stream* open_ ABSL_GUARDED_BY(mu_) = nullptr;  // for the destructor's cancel
  std::thread writer_;  // last: starts after the rest exists
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_REPLICA_LINK_H_

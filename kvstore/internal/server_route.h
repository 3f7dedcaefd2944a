// ServerRoute: a worker's way to one server index's key parts - that server's Session stream
// or, once it is lost, the stream to the backup that took its keys over (docs/replication.md,
// "Views and fencing"). A request goes through it as a function that issues it on a
// connection, so that one the lost server left unanswered is issued again, unchanged, on the
// backup's: pushes keep their numbers (ArrayChunk.seq), which make a resent push that the
// lost server had taken harmless.
//
// Failover: when the stream ends (the server died, or keepalive gave up on a frozen or cut-off
// one) or the server says it is fenced (ABORTED), the route says Hello to the index's backup -
// the next server while the index is on its own, else its own server, back after the
// failover that moved it (kvstore/server_node.h, BackupOf) - in the next view with
// serve_index = the index, again and again until a majority of the job's workers asked and
// the backup took the keys over, or until `failover_timeout`. Then the waiting requests (and
// those sent meanwhile) go there; if it fails, they and every later one fail with why, naming
// both servers (no copy is left when both of an index's servers were lost before the copy
// was made again).
//
// Thread safety: every method may be called from any thread; replies come on gRPC's threads
// or the failover's.
#ifndef TESSERA_KVSTORE_INTERNAL_SERVER_ROUTE_H_
#define TESSERA_KVSTORE_INTERNAL_SERVER_ROUTE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancellation.h"
#include "core/mutex.h"
#include "kvstore/internal/server_connection.h"
#include "proto/kvstore.pb.h"
#include "rpc/transport_security.h"

namespace tessera::kvstore::internal {

class ServerRoute {
 public:
  using OnReply = ServerConnection::OnReply;
  // Issues one request on `conn` with `on_reply`; `moved` says the index is served by a
  // server that took it over (it shares no memory with this worker).
  using Issue = std::function<void(ServerConnection& conn, bool moved, OnReply on_reply)>;

  struct Options {
    int index = 0;                     // the server index this route serves
    std::vector<std::string> servers;  // every server's address, by index
    Hello hello;                       // this worker's, as said to the index's own server
    // Where the index is served when the route starts: its own server in view 0, or (a
    // replacement of a lost worker, after failovers) the server and view it found it at.
    int server = -1;  // -1: `index`
    uint64_t view = 0;
    uint64_t barriers = 0;  // passed at the index so far (a replacement's predecessor's)
    absl::Duration failover_timeout = absl::Seconds(60);
    rpc::TransportSecurity security;
    const Cancellation* cancellation = nullptr;  // not owned, may be null
  };

  // `first`: the connection to the server serving the index (Options::server).
  ServerRoute(Options options, std::unique_ptr<ServerConnection> first);
  // Waits for a failover in progress; requests still pending fail (UNAVAILABLE).
  ~ServerRoute();

  void Send(Issue issue, OnReply on_reply) ABSL_LOCKS_EXCLUDED(mu_);
  // A command for the index's keys, to the server serving them now (after a failover in
  // progress, within `timeout`); a command that finds the server lost fails over as a
  // request does, and is sent again there.
  absl::StatusOr<CommandReply> Command(CommandRequest request, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cuts the stream for good (a cancelled job): no failover follows.
  void Abort() ABSL_LOCKS_EXCLUDED(mu_);
  // The server serving the index answered a barrier: a failover's Hello says how many.
  void PassedBarrier() ABSL_LOCKS_EXCLUDED(mu_);

  // The current server's Hello reply and address, and whether the index has moved.
  HelloReply hello() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string address() const ABSL_LOCKS_EXCLUDED(mu_);
  bool moved() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Request {
    Issue issue;
    OnReply on_reply;
  };
  // Issues `r` on the current connection, or queues it while a failover runs.
  void Dispatch(std::shared_ptr<Request> r) ABSL_LOCKS_EXCLUDED(mu_);
  // `r`, issued on connection `generation`, got `reply`: the server is lost.
  void Lost(std::shared_ptr<Request> r, uint64_t generation, const ServerMessage& reply)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The failover thread: moves the index to its backup, then issues the waiting requests.
  void FailOver(absl::Status why) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts FailOver unless one runs.
  void StartFailover(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a loss may be failed over (not closing, aborted or cancelled; two servers or more).
  bool CanFailOver() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;  // a failover ended
  std::shared_ptr<ServerConnection> conn_ ABSL_GUARDED_BY(mu_);
  // Connections lost, kept until the end: their callbacks may still be running.
  std::vector<std::shared_ptr<ServerConnection>> lost_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // connections made so far, less one
  int server_ ABSL_GUARDED_BY(mu_);               // the index of the server serving now
  uint64_t view_ ABSL_GUARDED_BY(mu_);
  uint64_t barriers_ ABSL_GUARDED_BY(mu_);  // passed at the index (Hello.barriers)
  bool failing_over_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);  // the failover failed: every request fails so
  std::vector<std::shared_ptr<Request>> waiting_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> failovers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::kvstore::internal

#endif  // TESSERA_KVSTORE_INTERNAL_SERVER_ROUTE_H_

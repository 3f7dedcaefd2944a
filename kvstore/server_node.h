// ServerNode: the stores one parameter-server process serves - its own index's, and, after a
// failover, the indexes it took over from the copies it holds (docs/replication.md, "Views
// and fencing").
//
// A worker whose stream to an index's server broke (or whose server fenced itself) says Hello
// to that index's backup with the next view and `serve_index` set to the index. The backup
// counts those Hellos per (job, view, index); once a majority of the job's workers asked (so
// a minority cut off with the old server cannot move the job alone) it takes the keys over:
// its copy becomes a store serving the index as primary in the new view
// (ServerStore::TakeOver), and the old server is fenced (its updates are refused). Until the
// majority is there, such a Hello is UNAVAILABLE naming how many asked, and the worker says
// it again (ServerConnection::Connect does).
//
// Where copies live: server `i`'s own keys on server `i + 1` (the ring); an index served by a
// server other than its own, on its own server once that is back (restarted by a supervisor
// or Kubernetes); an index served by its own server again (a second failover), on the next.
// BackupOf says it; workers fail over to the same server (ServerRoute).
//
// Lifetime: a store that took an index over serves its job only. It is let go when a Hello of
// another job comes and none of its job's workers is connected to it any more; sessions and
// commands hold the stores they use (shared ownership), so it goes once the last of them ends.
//
// Thread safety: every method may be called from any thread.
#ifndef TESSERA_KVSTORE_SERVER_NODE_H_
#define TESSERA_KVSTORE_SERVER_NODE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "kvstore/replica_link.h"
#include "kvstore/server_store.h"
#include "ndarray/runtime.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

// The server that holds the copy of index `index` while server `host` serves it, of
// `num_servers`.
int BackupOf(int index, int host, int num_servers);

class ServerNode {
 public:
  // A link to server `server` (by index), for a store that took an index over; null: none.
  using LinkFactory = std::function<std::unique_ptr<ReplicaLink>(int server)>;

  // `backup` (null: none) is the own store's link to its backup; `links` makes the links of
  // the stores taking indexes over (null: they keep one copy).
  ServerNode(const Runtime& rt, ServerStoreOptions options,
             std::unique_ptr<ReplicaLink> backup = nullptr, LinkFactory links = nullptr);

  ServerStore& own() { return *own_; }
  const ServerStore& own() const { return *own_; }
  std::shared_ptr<ServerStore> shared_own() { return own_; }

  // The store that serves the index `hello` asks for: the own one, or one that took an index
  // over from this server's copy (made once a majority of the workers asked in the Hello's
  // view). UNAVAILABLE while the majority is not there; FAILED_PRECONDITION naming the index
  // when this server holds no copy of it. Lets go of the takers of other jobs that serve no
  // worker.
  absl::StatusOr<std::shared_ptr<ServerStore>> StoreFor(const Hello& hello)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The store a command is for (CommandRequest.serve_index); NOT_FOUND naming the index when
  // this server does not serve it.
  absl::StatusOr<std::shared_ptr<ServerStore>> StoreFor(const CommandRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The store serving index `index` after a takeover here (-1: the newest of those serving);
  // null: none.
  const ServerStore* taken_over(int index = -1) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Runtime rt_;
  const ServerStoreOptions options_;
  const LinkFactory links_;
  const std::shared_ptr<ServerStore> own_;
  mutable Mutex mu_;
  // Per (job, view, index): the ranks that asked for the index.
  std::map<std::tuple<std::string, uint64_t, int>, std::set<int>> asked_ ABSL_GUARDED_BY(mu_);
  // The stores made by takeovers that serve: per (job, index).
  std::map<std::pair<std::string, int>, std::shared_ptr<ServerStore>> serving_
      ABSL_GUARDED_BY(mu_);
  const ServerStore* newest_ ABSL_GUARDED_BY(mu_) = nullptr;  // in serving_, or null
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_SERVER_NODE_H_

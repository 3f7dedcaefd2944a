// ServerNode: the stores one parameter-server process serves - its own index's, and, after a
// failover, the index of the primary it backs up (docs/replication.md, "Views and fencing").
//
// A worker whose stream to a primary broke (or whose primary fenced itself) says Hello to
// that primary's backup with the next view and `serve_index` set to the lost index. The
// backup counts those Hellos per view; once a majority of the job's workers asked (so a
// minority cut off with the old primary cannot move the job alone) it takes the keys over:
// its copy becomes a store serving the index as primary in the new view
// (ServerStore::TakeOver), and the old primary is fenced (its updates are refused). Until the
// majority is there, such a Hello is UNAVAILABLE naming how many asked, and the worker says
// it again (ServerConnection::Connect does).
//
// Thread safety: every method may be called from any thread.
#ifndef TESSERA_KVSTORE_SERVER_NODE_H_
#define TESSERA_KVSTORE_SERVER_NODE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "kvstore/replica_link.h"
#include "kvstore/server_store.h"
#include "ndarray/runtime.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

class ServerNode {
 public:
  // `backup` (null: none) is the own store's link to its backup.
  ServerNode(const Runtime& rt, ServerStoreOptions options,
             std::unique_ptr<ReplicaLink> backup = nullptr);

  ServerStore& own() { return *own_; }
  const ServerStore& own() const { return *own_; }

  // The store that serves the index `hello` asks for: the own one, or the one that took over
  // the primary this server backs up (made once a majority of the workers asked in the
  // Hello's view). UNAVAILABLE while the majority is not there; FAILED_PRECONDITION naming
  // the index when this server holds no copy of it (it is not its backup, or the job is not
  // replicated).
  absl::StatusOr<ServerStore*> StoreFor(const Hello& hello) ABSL_LOCKS_EXCLUDED(mu_);
  // The store a command is for (CommandRequest.serve_index); NOT_FOUND naming the index when
  // this server does not serve it.
  absl::StatusOr<ServerStore*> StoreFor(const CommandRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // The store serving the index taken over (null: none has been).
  const ServerStore* taken_over() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The primary this server backs up: its left neighbour.
  int primary() const {
    return (options_.server_index + options_.num_servers - 1) % options_.num_servers;
  }

  const Runtime rt_;
  const ServerStoreOptions options_;
  const std::unique_ptr<ServerStore> own_;
  mutable Mutex mu_;
  // Per (job, view): the ranks that asked for the primary's keys.
  std::map<std::pair<std::string, uint64_t>, std::set<int>> asked_ ABSL_GUARDED_BY(mu_);
  // Every store made by a takeover (sessions may point into an older job's), the newest last.
  std::vector<std::unique_ptr<ServerStore>> taken_ ABSL_GUARDED_BY(mu_);
  std::string taken_job_ ABSL_GUARDED_BY(mu_);  // the newest takeover's job
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_SERVER_NODE_H_

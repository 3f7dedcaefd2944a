// ReplicaLink: how a primary parameter server reaches its backup (docs/replication.md).
// The store hands it each update of a key part as it happens; the link delivers the updates
// in the order given and reports each one's acknowledgement. server/replica_link.h is the
// gRPC one (the backup's Replicate stream).
#ifndef TESSERA_KVSTORE_REPLICA_LINK_H_
#define TESSERA_KVSTORE_REPLICA_LINK_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

class ReplicaLink {
 public:
  // Called once per update: OK when the backup holds it, else why not (the backup refused
  // it, or could not be reached). Never from within Send (the caller holds locks that `done`
  // takes), always from a thread of the link's own.
  using Done = std::function<void(const absl::Status& status)>;

  // Returns once no `done` runs any more; an update's `done` not yet run may run (with an
  // error) before it returns, or not at all.
  virtual ~ReplicaLink() = default;

  // Queues `update` (value.data holding the whole part; the link sets the id and splits it)
  // and returns at once.
  virtual void Send(ReplicaMessage update, Done done) = 0;
  // The backup's address, for messages.
  virtual const std::string& peer() const = 0;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_REPLICA_LINK_H_

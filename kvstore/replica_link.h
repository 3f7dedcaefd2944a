// ReplicaLink: how a primary parameter server reaches its backup (docs/replication.md).
// The store hands it each update of a key part as it happens; the link delivers the updates
// in the order given and reports each one's acknowledgement. server/replica_link.h is the
// gRPC one (the backup's Replicate stream).
#ifndef TESSERA_KVSTORE_REPLICA_LINK_H_
#define TESSERA_KVSTORE_REPLICA_LINK_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

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

  // An update's value bytes, lent: `owner` keeps them alive, and nothing changes them, until
  // the link lets go of `owner`.
  struct Payload {
    std::shared_ptr<const void> owner;
    std::string_view bytes;
  };

  // Queues `update`, whose value's data is `payload` (none for an optimizer message), and
  // returns at once; the link sets the id and splits it into chunks.
  virtual void Send(ReplicaMessage update, Payload payload, Done done) = 0;
  // The backup's address, for messages.
  virtual const std::string& peer() const = 0;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_REPLICA_LINK_H_

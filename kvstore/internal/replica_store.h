// ReplicaStore: a backup server's copy of its primary's key parts (docs/replication.md),
// kept current by the primary's Replicate stream. Each update is applied as the primary applied
// it - the round's sum or the push through the same optimizer, or copied in without one - so
// the copy holds the primary's bits. The locks are its owner's (the server store's).
//
// What it refuses (each update is applied whole or not at all, and the refusal names the key
// and what was wrong): an update from a server that is not this one's primary, from an older
// view than one already seen, an update of a key it has no Init of, a value of another shape
// or a wrong size, a version beyond the next (one between was lost), a job, mode or worker
// count other than the copy's (except an Init, which starts another job's copy afresh), an
// optimizer that cannot be made. A version it holds already is acknowledged and changes
// nothing (a resend).
//
// Failover: TakeOver hands the copy to a store that serves it as primary in a new view; from
// then on every update of the old primary is refused with ABORTED (it is fenced: a primary
// that was only frozen or cut off must not complete a round any more).
#ifndef TESSERA_KVSTORE_INTERNAL_REPLICA_STORE_H_
#define TESSERA_KVSTORE_INTERNAL_REPLICA_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/shape.h"
#include "kvstore/internal/request_assembler.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

// A worker's state after one of its batches (WorkerMessage.stash), as a server keeps it for
// the worker's replacement: shared, so that a replica message can lend the bytes.
struct WorkerStash {
  uint64_t batch = 0;
  std::shared_ptr<const std::string> bytes;
};
// Keeps `stash` among one rank's `held` stashes (oldest first): a replacement's stash of a
// batch replaces its predecessor's of that batch and later, and the newest two stay - the
// batch a replacement resumes after is the newest or, when its predecessor stashed the next
// one before it was lost, the one before.
void KeepStash(std::deque<WorkerStash>& held, WorkerStash stash);

// One message of a replica update, and the bytes of the value it carries: [offset, offset +
// size) (not in the message, so a sender can attach them without a copy).
struct ReplicaChunk {
  ReplicaMessage message;
  uint64_t offset = 0;
  uint64_t size = 0;
};
// `update` (its value's data, of `value_bytes`, left out; its optimizer slot whole) as the
// messages of update `id`: each with the next at most `max_chunk_bytes` of the value and of
// the slot, the rest of the update on the last. The one place the chunk layout is made.
std::vector<ReplicaChunk> PlanReplicaChunks(ReplicaMessage update, uint64_t value_bytes,
                                            uint64_t id, uint64_t max_chunk_bytes);
// The same with each message's value bytes copied in from update.value.data.
std::vector<ReplicaMessage> SplitReplicaUpdate(ReplicaMessage update, uint64_t id,
                                               uint64_t max_chunk_bytes);

// One Replicate stream's messages made whole again (each update's chunks, in order; its
// optimizer slot is the concatenation of its messages' pieces).
class ReplicaReceiver {
 public:
  ReplicaReceiver(int server_index, uint64_t max_array_bytes);

  // An update made whole: the last message, without value.data, and the value's bytes in
  // chunk order.
  struct Whole {
    ReplicaMessage update;
    std::vector<std::string> pieces;
  };
  // The whole update once `message` completes it; nullopt while more chunks are due; the
  // refusal of a malformed chunk (its update's other chunks are then dropped).
  absl::StatusOr<std::optional<Whole>> Add(ReplicaMessage message);

 private:
  const uint64_t max_slot_bytes_;
  RequestAssembler assembler_;
  uint64_t slot_id_ = 0;  // the update whose slot pieces slot_ holds
  std::string slot_;
};

class ReplicaStore {
 public:
  // One key part as the backup holds it, copied out.
  struct Copy {
    std::vector<int64_t> shape;
    std::string value;  // float32, shape's size
    uint64_t version = 0;
    uint64_t pushes = 0;
    std::vector<uint64_t> taken;  // per rank
    std::string optimizer_slot;   // Optimizer::SaveSlot; "" without an optimizer
  };

  // A copy, on server `server_index`, of the key parts of server index `index` (-1: its left
  // neighbour, the ring's placement); `rt` makes the copy's arrays and runs its optimizer.
  ReplicaStore(const Runtime& rt, int server_index, int num_servers, int index = -1);
  // The server index whose parts an update carries (ReplicaMessage.index, else its sender's).
  static int IndexOf(const ReplicaMessage& update);

  // Applies a whole update, or refuses it changing nothing. The value's bytes are `pieces`
  // (ReplicaReceiver's) or, when there are none, update.value.data.
  absl::Status Apply(ReplicaMessage update, std::vector<std::string> pieces = {});

  // The copy, whole, for a store that takes the primary's keys over.
  struct Handover {
    std::string job_id;
    SyncMode mode = SYNC_MODE_UNSET;
    int num_workers = 0;
    uint64_t view = 0;  // the view the taker serves in
    struct Part {
      Shape shape;
      NDArray value;
      uint64_t version = 0;
      std::vector<uint64_t> taken;  // per rank
      uint64_t pushes = 0;
    };
    std::map<int, Part> parts;
    std::unique_ptr<Optimizer> optimizer;  // null: the primary had none
    OptimizerSpec optimizer_spec;
    std::vector<std::deque<WorkerStash>> stashes;  // per rank (index 0's: ServerStore::Stash)
  };
  // Moves the copy out for serving in `view` (above every view seen) and fences the primary;
  // FAILED_PRECONDITION when there is no copy of job `job_id`, the view is not newer, or the
  // copy was still being brought up to date (ReplicaMessage.caught_up has not come).
  absl::StatusOr<Handover> TakeOver(const std::string& job_id, uint64_t view);
  // The view of a takeover (0: none).
  uint64_t taken_over_in() const { return taken_over_in_; }

  const std::string& job_id() const { return job_id_; }
  uint64_t view() const { return view_; }
  // The copy of `key`; NOT_FOUND naming it when there is none.
  absl::StatusOr<Copy> Find(int key) const;

 private:
  struct Part {
    Shape shape;
    NDArray value;  // float32 CPU
    uint64_t version = 0;
    std::vector<uint64_t> taken;
    uint64_t pushes = 0;
  };
  // The checks every update passes; `another_job` says whether it starts a new job's copy.
  absl::Status Check(const ReplicaMessage& update, const std::string& what,
                     bool* another_job) const;
  // The value's bytes as an array of `shape`.
  absl::StatusOr<NDArray> Array(const Shape& shape, const ReplicaMessage& update,
                                const std::vector<std::string>& pieces,
                                const std::string& what) const;
  // An update's gradient from the compressed pushes it carries (ReplicaMessage.push_ranks),
  // summed in rank order by the code the primary summed them with (SyncRound).
  absl::StatusOr<NDArray> PushSum(const Shape& shape, const ReplicaMessage& update,
                                  const std::vector<std::string>& pieces,
                                  const std::string& what) const;
  void StartJob(const ReplicaMessage& update);
  // A worker's stash (ReplicaMessage.stash_batch), kept.
  absl::Status ApplyStash(const ReplicaMessage& update, const std::vector<std::string>& pieces,
                          bool another_job, const std::string& what);

  const Runtime rt_;
  const int server_index_;
  const int primary_;  // the server index whose parts this copies
  bool has_job_ = false;
  std::string job_id_;  // may be empty: a job without a name
  SyncMode mode_ = SYNC_MODE_UNSET;
  int num_workers_ = 0;
  uint64_t view_ = 0;
  std::map<int, Part> parts_;
  std::unique_ptr<Optimizer> optimizer_;  // the primary's; null: it has none
  OptimizerSpec optimizer_spec_;          // what optimizer_ was made from
  std::vector<std::deque<WorkerStash>> stashes_;  // per rank, as the primary keeps them
  uint64_t taken_over_in_ = 0;
  // Whether the copy holds every update of its job: false from a resync's first snapshot to
  // its caught_up marker. Only a complete copy is taken over.
  bool complete_ = true;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_REPLICA_STORE_H_

// ReplicaStore: a backup server's copy of its primary's key parts (docs/replication.md),
// kept current by the primary's Replicate stream: each update replaces one key part's value,
// version, taken push numbers and optimizer slot. No locks: the server store locks it.
//
// What it refuses (each update is applied whole or not at all, and the refusal names the key
// and what was wrong): an update from a server that is not this one's primary, from an older
// view than one already seen, an update of a key it has no Init of, a value of another shape
// or a wrong size, a version beyond the next (one between was lost), a job, mode or worker
// count other than the copy's (except an Init, which starts another job's copy afresh).
// A version it holds already is acknowledged and changes nothing (a resend).
#ifndef TESSERA_KVSTORE_INTERNAL_REPLICA_STORE_H_
#define TESSERA_KVSTORE_INTERNAL_REPLICA_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/internal/request_assembler.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

// `update` (value.data and optimizer_slot whole) as the messages of update `id`: each with
// the next at most `max_chunk_bytes` of the value and of the slot, the rest of the update on
// the last.
std::vector<ReplicaMessage> SplitReplicaUpdate(ReplicaMessage update, uint64_t id,
                                               uint64_t max_chunk_bytes);

// One Replicate stream's messages made whole again (each update's chunks, in order; its
// optimizer slot is the concatenation of its messages' pieces).
class ReplicaReceiver {
 public:
  ReplicaReceiver(int server_index, uint64_t max_array_bytes);

  // The whole update (value.data holding every chunk's bytes) once `message` completes it;
  // nullopt while more chunks are due; the refusal of a malformed chunk (its update's other
  // chunks are then dropped).
  absl::StatusOr<std::optional<ReplicaMessage>> Add(ReplicaMessage message);

 private:
  const uint64_t max_slot_bytes_;
  RequestAssembler assembler_;
  uint64_t slot_id_ = 0;  // the update whose slot pieces slot_ holds
  std::string slot_;
};

class ReplicaStore {
 public:
  // One key part as the backup holds it.
  struct Part {
    std::vector<int64_t> shape;
    std::string value;  // float32, shape's size
    uint64_t version = 0;
    std::vector<uint64_t> taken;  // per rank
    std::string optimizer_slot;
  };

  ReplicaStore(int server_index, int num_servers);

  // Applies a whole update (ReplicaReceiver's), or refuses it changing nothing.
  absl::Status Apply(ReplicaMessage update);

  const std::string& job_id() const { return job_id_; }
  uint64_t view() const { return view_; }
  // The copy of `key`; null when there is none.
  const Part* Find(int key) const;
  const std::map<int, Part>& parts() const { return parts_; }

 private:
  const int server_index_;
  const int primary_;  // the server this one backs up: its left neighbour
  bool has_job_ = false;
  std::string job_id_;  // may be empty: a job without a name
  SyncMode mode_ = SYNC_MODE_UNSET;
  int num_workers_ = 0;
  uint64_t view_ = 0;
  std::map<int, Part> parts_;
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_REPLICA_STORE_H_

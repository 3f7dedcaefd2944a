// Membership: the workers of the job a parameter server serves, without sessions or locks
// (its owner, the store, locks it and holds the sessions): which job and mode, which ranks
// are connected, which left and why, and which wait in the barrier (by request id).
//
//   Admit   a Hello: checked (protocol, worker count, rank, mode); a Hello naming another job
//           starts that job afresh once no worker of the current one is connected, so daemons
//           serve job after job (the owner then drops the old job's keys and optimizer).
//   Depart  a worker's stream ended: its rank counts as departed (with why) until it says
//           Hello again; requests that need it fail naming it - unless the job replaces
//           lost workers (Hello.replace_workers) and the rank was lost (its stream ended
//           without a LeaveRequest), where they wait for the rank's replacement as for a rank
//           that sends nothing (until round_timeout).
//   Barrier answered when every rank waits in it; it cannot complete while a rank is
//           departed, or once it has waited round_timeout for ranks that send nothing. The
//           barriers opened are counted (a replacement skips those its predecessor passed).
#ifndef TESSERA_KVSTORE_INTERNAL_MEMBERSHIP_H_
#define TESSERA_KVSTORE_INTERNAL_MEMBERSHIP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

class Membership {
 public:
  Membership(int server_index, int num_workers);

  int num_workers() const { return static_cast<int>(connected_.size()); }
  const std::string& job_id() const { return job_id_; }
  SyncMode mode() const { return mode_; }
  bool connected(int rank) const { return connected_[rank] != 0; }
  int connected_count() const;
  // Per rank: why it left and what waits on it fails (OK while it is here, before it came,
  // or while its replacement is awaited).
  const std::vector<absl::Status>& departed() const { return departed_; }
  // Whether the job replaces lost workers (its first Hello said so).
  bool replaces_workers() const { return replaces_workers_; }
  // Barriers the job passed (opened for every rank) so far.
  uint64_t barriers_opened() const { return barriers_opened_; }

  // Takes `hello`'s rank into the job it names; the refusal names what is wrong. `started`
  // says whether the Hello started a new job (nothing of the last one carries over).
  absl::Status Admit(const Hello& hello, bool* started);
  // Serves job `job_id` in `mode` from here on, with no worker connected yet: a store that
  // took over another server's keys (a failover) continues that job, not a new one.
  void Adopt(const std::string& job_id, SyncMode mode);
  // `rank` left (its stream ended: `why`; `on_purpose`: it said so first). Returns the status
  // that requests waiting on it get (OK: they wait for its replacement, which a job that
  // replaces workers awaits for a rank lost, not for one that left); it leaves the barrier.
  absl::Status Depart(int rank, absl::string_view why, bool on_purpose = false);

  // Request `id` of `rank` waits in the barrier, from `now`; the refusal says why it cannot
  // (a rank departed, or it already waits).
  absl::Status EnterBarrier(int rank, uint64_t id, absl::Time now);
  // Per rank: whether it waits in the barrier.
  std::vector<char> InBarrier() const;
  bool barrier_full() const;
  bool barrier_waiting() const;
  // Whether the barrier has waited at least `timeout` by `now`.
  bool BarrierOverdue(absl::Time now, absl::Duration timeout) const;
  // The barrier's waiters (rank, request id), which leave it: to answer, `opened` (counted)
  // or failed.
  std::vector<std::pair<int, uint64_t>> TakeBarrier(bool opened);

 private:
  const int server_index_;
  std::string job_id_;
  SyncMode mode_ = SYNC_MODE_UNSET;
  bool replaces_workers_ = false;
  uint64_t barriers_opened_ = 0;
  std::vector<char> connected_;              // per rank
  std::vector<absl::Status> departed_;       // per rank
  std::vector<std::optional<uint64_t>> barrier_;  // per rank: its request waiting there
  absl::Time barrier_opened_;  // when the first waiter came
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_MEMBERSHIP_H_

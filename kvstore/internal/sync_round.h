// SyncRound: one key's dist_sync rounds, without sessions, waiters or locks (its owner, the
// parameter server's store, locks the key): which workers pushed into the open round, their
// pushes summed in rank order whatever order they arrive in (float addition is not
// associative: a run's result must not depend on timing), and how many rounds each worker
// has pushed into, which is the round its pulls wait for.
//
// A push of rank r is added to the sum at once when every rank below r has pushed (or the
// round completes without it); otherwise it is held, as received, until they have. A round
// is ready when every rank pushed or is `joined` (waits in a barrier: Horovod's "join"); the
// owner applies the sum, then Finish()es the round, or Abandon()s it when the update failed.
#ifndef TESSERA_KVSTORE_INTERNAL_SYNC_ROUND_H_
#define TESSERA_KVSTORE_INTERNAL_SYNC_ROUND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::kvstore {

// A request's payload, in pieces, into contiguous memory.
void CopyPieces(const std::vector<std::string_view>& pieces, char* out);
// out[i] += the payload's i-th float. Pieces normally split at float boundaries; a client's
// odd split is joined first.
void AddPieces(const std::vector<std::string_view>& pieces, float* out);

class SyncRound {
 public:
  // A push's bytes: the pieces received on the stream (kept as they are if the push must
  // wait for lower ranks), or a view of the worker's shared-memory slot (copied if it must
  // wait, as the slot is the worker's again once the push is acknowledged).
  struct Payload {
    std::vector<std::string> pieces;
    std::optional<std::string_view> in_place;
    // The bytes, in order.
    std::vector<std::string_view> views() const;
  };

  explicit SyncRound(int num_workers);

  int num_workers() const { return static_cast<int>(pushed_.size()); }
  int64_t rounds_done() const { return rounds_done_; }
  // Whether a push opened the round that is not done yet.
  bool open() const { return pushed_count_ > 0; }
  // Per rank: whether it pushed into the open round.
  const std::vector<char>& pushed() const { return pushed_; }
  int pushed_count() const { return pushed_count_; }
  bool pushed(int rank) const { return pushed_[rank] != 0; }
  // The rounds `rank` has pushed into (or joined): its pulls wait until rounds_done() reaches it.
  int64_t rounds_of(int rank) const { return rounds_of_[rank]; }

  // Takes `rank`'s push into the open round (it must have none there yet) into `sum` (the
  // key's merge buffer), or holds it until the ranks below it have pushed.
  void Accept(int rank, Payload payload, float* sum);
  // Whether every rank pushed into the open round or is in `joined` (per rank). If so, the
  // held pushes are summed too, in rank order, and `sum` holds the round's sum.
  bool Ready(const std::vector<char>& joined, float* sum);
  // The ready round was applied: it counts as done, and the next one is empty.
  void Finish();
  // The ready round could not be applied: its pushes are dropped and each worker counts
  // only the rounds done, so its pulls answer with the value as it was.
  void Abandon();
  // A barrier opened: every worker has pushed into every round done (those it joined).
  void AlignRanks();
  // Starts from `rounds_done` completed rounds with none open, every worker in all of them:
  // a key taken over from a backup's copy (a failover).
  void Restore(int64_t rounds_done);

 private:
  void Add(const std::vector<std::string_view>& payload, float* sum);
  void AddHeld(int rank, float* sum);
  void Clear();

  int64_t rounds_done_ = 0;
  std::vector<char> pushed_;     // per rank, into the open round
  int pushed_count_ = 0;
  std::vector<int64_t> rounds_of_;  // per rank
  // The pushes of ranks below next_rank_ are in the sum (none yet: sum_empty_); a push of a
  // higher rank waits in held_.
  int next_rank_ = 0;
  bool sum_empty_ = true;
  std::vector<std::vector<std::string>> held_;  // per rank
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_INTERNAL_SYNC_ROUND_H_

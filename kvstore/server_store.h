// ServerStore: what one parameter server does, without the transport. The `tessera-ps`
// daemon (server/) adapts it to gRPC streams; tests drive it directly.
//
// A server holds its part of every key (proto/kvstore.proto says how keys are split) as a
// float32 CPU array. Each worker stream becomes a Session; its requests arrive through
// Session::Handle in stream order and its replies leave through the Session's Send function,
// possibly later and from another session's thread (a dist_sync pull is answered by the push
// that completes its round).
//
// Semantics:
//   Init      the first value of a key wins; a later Init of the same shape and dtype is
//             accepted and ignored, another shape or dtype is INVALID_ARGUMENT.
//   dist_sync for each key, one round takes one push from every worker; the pushes are
//             summed in rank order (so a run's result does not depend on the order they
//             arrive in) and, when the last arrives, the optimizer runs once
//             (update_on_kvstore) or the sum becomes the value (the workers update). A pull
//             from worker w is answered once every round w has pushed into is complete, so
//             it never sees a half-applied round. A second push of w into the same open
//             round waits (unacknowledged) until that round completes.
//   dist_async each push is applied on arrival (optimizer, or the push becomes the value);
//             pulls are answered at once.
//   PushPull  a push whose answer is the pull the worker would send right after it: the
//             value once the push's round is applied (dist_sync), or at once (dist_async);
//             a push parked for the next round is answered after that one.
//   Numbered  pushes carrying ArrayChunk.seq: one the server has taken already (sent again
//             on a new stream) is answered as the first was and not applied; a gap in the
//             numbers is INVALID_ARGUMENT. Parked pushes dropped unanswered are not taken.
//   Shared memory  a server whose workers are on its host (it serves a Unix socket) keeps
//             each key of at least shared_memory_min_bytes in a SharedMemory region with a
//             slot per worker rank; a worker that maps its slot (MapKey) pushes by writing
//             there and is answered there, and the stream carries only the headers. A slot is
//             one worker's: written by it for a push and read by the server before that push
//             is answered; written by the server for a pull's answer and read by the worker
//             before its next request of the key (a worker's requests of one key are ordered).
//   Barrier   answered when every worker waits in it. In dist_sync a waiting worker counts
//             as having pushed zeros for the rounds the others complete meanwhile (Horovod's
//             "join"): workers with fewer batches in an epoch meet the others at the epoch's
//             barrier instead of hanging them. When the barrier opens, every worker's round
//             count is aligned to the key's.
//   Jobs      Hello names the worker's job; the first Hello of another job, once no worker
//             of the current one is connected, starts the store afresh (keys, rounds,
//             optimizer, mode), so daemons serve job after job.
//   Backup  with a ReplicaLink, every change of a key part (its Init, a completed dist_sync
//             round, an applied dist_async push) goes to the backup server, and what could
//             show it waits for the backup's acknowledgement: a dist_sync pull is answered
//             only once the value it gets is on both servers, a dist_async push only once
//             the backup holds it (dist_async pulls are answered at once). When the backup
//             cannot be reached or refuses an update, the store says so in its log and goes
//             on with one copy for the rest of the job (docs/replication.md: no failover
//             yet). A backup keeps its primary's copy (OpenReplicaSession, BackupCopy).
//   A worker leaving (stream closed or keepalive timeout) in dist_sync: every request that
//   needs it - open rounds it has not pushed into, pulls waiting on them, a barrier - is
//   answered UNAVAILABLE naming the worker; its rank may reconnect (a new Hello) and push.
//   In a job that replaces lost workers (Hello.replace_workers) a rank lost without a
//   LeaveRequest is awaited instead, until round_timeout: its replacement's Hello (rejoin)
//   learns how far it got (WorkerProgress), and its first pull of a key (after_push) gets
//   the value its predecessor pulled - kept for one round when a newer round has completed.
//
// Its parts, each without locks: RequestAssembler (a worker's chunks made whole), SyncRound
// (one key's rounds and their rank-order sum), Membership (the job, its ranks, departures,
// the barrier), KeySlots and SlotBudget (shared memory); the store dispatches, locks and
// answers.
//
// Bad input (unknown key, wrong dtype or shape, a pull before Init, malformed chunks, a
// request before Hello) is answered with INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION
// naming the key and shapes; it changes nothing and the session keeps serving.
//
// Thread safety: every method may be called from any thread. Handle must be called for one
// session from one thread at a time (the stream's order). Pushes and pulls lock only their
// key (and share the store's lock), so one key's update - the optimizer on a large array -
// never holds up another key's pushes and pulls; what spans keys or sessions (Hello, Init,
// a barrier, a worker leaving, commands, round deadlines) takes the store's lock exclusively.
#ifndef TESSERA_KVSTORE_SERVER_STORE_H_
#define TESSERA_KVSTORE_SERVER_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mutex.h"
#include "core/shared_mutex.h"
#include "kvstore/internal/key_slots.h"
#include "kvstore/internal/membership.h"
#include "kvstore/internal/replica_store.h"
#include "kvstore/internal/request_assembler.h"
#include "kvstore/internal/sync_round.h"
#include "kvstore/kvstore_metrics.h"
#include "kvstore/optimizer.h"
#include "kvstore/replica_link.h"
#include "kvstore/transport.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "proto/kvstore.pb.h"

namespace tessera::kvstore {

struct ServerStoreOptions {
  int server_index = 0;
  int num_servers = 1;
  int num_workers = 1;
  // Pull replies are cut into chunks of at most this many bytes.
  uint64_t max_chunk_bytes = uint64_t{1} << 20;
  // The largest part of one key this server accepts (a guard against absurd shapes).
  uint64_t max_array_bytes = uint64_t{16} << 30;
  // What one worker's stream may hold in requests still being received: their bytes, and
  // their number. Beyond either a new chunk is RESOURCE_EXHAUSTED (that request fails, the
  // stream and the worker's other requests go on). Pushes parked for a key's next round
  // count in the bytes too.
  uint64_t max_session_staged_bytes = uint64_t{4} << 30;
  int max_session_staged_requests = 4096;
  // dist_sync: how many of one worker's requests may wait at once - pulls for their round,
  // pushes parked for the next one (a trainer has at most one of each per key). Beyond it a
  // pull or push is RESOURCE_EXHAUSTED.
  int max_session_waiting_requests = 4096;
  // dist_sync: a round or a barrier still waiting this long after it opened for ranks that
  // never connected, or connected and stopped sending, fails its waiting requests with
  // DEADLINE_EXCEEDED naming those ranks (departed ranks fail them at once).
  absl::Duration round_timeout = absl::Seconds(120);
  // Where the store reads the time (rounds and barriers opening, their deadlines), and
  // whether a thread of its own checks the deadlines (every round_timeout / 4, at most every
  // second). A test passes a clock it moves and calls CheckDeadlines itself: no sleeps.
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  bool watch_deadlines = true;
  // Share keys through memory with same-host workers (ParameterServer sets it when serving a
  // Unix socket): keys of at least shared_memory_min_bytes, while the regions stay within
  // max_shared_memory_bytes and max_shared_memory_keys (each holds a file descriptor) in all.
  bool shared_memory = false;
  uint64_t shared_memory_min_bytes = uint64_t{64} << 10;
  uint64_t max_shared_memory_bytes = uint64_t{4} << 30;
  int max_shared_memory_keys = 256;
  // The view the store serves its index in (docs/replication.md): 0, or the view of the
  // failover that gave it the index (TakeOver). A Hello of another view is refused.
  uint64_t view = 0;
  // The server that runs the store when it serves another server's index after a failover
  // (its replica messages say so); -1: server_index.
  int host_index = -1;
  // Where the store counts its traffic, updates and rounds; null: the process's
  // (KVStoreServerMetrics()). Not owned; outlives the store.
  ServerMetrics* metrics = nullptr;
};

class ServerStore {
 public:
  // Delivers replies to one worker, in the order of the calls (the caller queues them). It may
  // be called from several threads at once (for different keys); each call's replies must
  // stay together.
  using Send = std::function<void(std::vector<ServerMessage> replies)>;

  class Session {
   public:
    ~Session();  // as Close(UNAVAILABLE "stream closed")
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // One message of this worker's stream (taken by value: array payloads are moved, not
    // copied, into the request being assembled).
    void Handle(WorkerMessage message);
    // The stream ended; `why` says how. Later Handle calls are ignored.
    void Close(const absl::Status& why);

   private:
    friend class ServerStore;

    Session(ServerStore* store, Send send)
        : store_(store),
          send_(std::move(send)),
          assembler_({.server_index = store->options_.server_index,
                      .max_array_bytes = store->options_.max_array_bytes,
                      .max_requests = store->options_.max_session_staged_requests,
                      .max_bytes = store->options_.max_session_staged_bytes}) {}

    ServerStore* const store_;  // not owned
    const Send send_;
    // The requests being received chunk by chunk; touched only by Handle (one thread at a
    // time per session).
    RequestAssembler assembler_;
    // Requests of this worker waiting in keys (pulls, parked pushes), and the parked pushes'
    // bytes: counted up and down under different keys' locks, hence atomic.
    std::atomic<int> waiting_{0};
    std::atomic<uint64_t> parked_bytes_{0};
    // The rank from Hello (-1 before it), also read under the store's lock (set under it
    // exclusively).
    int rank_ = -1;
    bool closed_ = false;
    bool leaving_ = false;  // it sent a LeaveRequest: its departure is on purpose
  };

  // The backup side: one primary's Replicate stream.
  class ReplicaSession {
   public:
    // One message of the stream; the acknowledgement once it completes an update (or its
    // refusal), nullopt while the update's chunks are still due.
    std::optional<ReplicaAck> Handle(ReplicaMessage message);

   private:
    friend class ServerStore;
    explicit ReplicaSession(ServerStore* store)
        : store_(store), receiver_(store->options_.server_index, store->options_.max_array_bytes) {}
    ServerStore* const store_;  // not owned
    ReplicaReceiver receiver_;
  };

  // `backup` (null: none) receives every change of this server's key parts; the store owns it.
  ServerStore(const Runtime& rt, ServerStoreOptions options,
              std::unique_ptr<ReplicaLink> backup = nullptr);
  ~ServerStore() ABSL_LOCKS_EXCLUDED(mu_, watchdog_mu_);

  // A store that serves the key parts of a backup's copy as their primary after a failover
  // (docs/replication.md): options.server_index is the index taken over and options.view the
  // handover's view. It continues the job where the copy is: every key at its version, each
  // worker's pushes taken as the copy says. The workers say Hello again (that view, that
  // index) and send again what the lost primary left unanswered; the pushes' numbers make the
  // ones it had taken harmless. It has no backup of its own.
  // `backup` (null: none) is where the index's copy goes from now on; it starts out of date
  // and is brought up to date by ResyncBackup.
  static absl::StatusOr<std::unique_ptr<ServerStore>> TakeOver(
      const Runtime& rt, ServerStoreOptions options, ReplicaStore::Handover handover,
      std::unique_ptr<ReplicaLink> backup = nullptr);

  // A session for one worker stream; replies go to `send`.
  std::unique_ptr<Session> Open(Send send);
  // A session for the Replicate stream of the primary this server backs up.
  std::unique_ptr<ReplicaSession> OpenReplicaSession();
  // This server's copy of server index `index`'s part of `key` (-1: its left neighbour's, the
  // ring's placement), NOT_FOUND naming it when there is none.
  absl::StatusOr<ReplicaStore::Copy> BackupCopy(int key, int index = -1) const
      ABSL_LOCKS_EXCLUDED(replica_mu_);
  // Whether the backup holds every key again after it was lost (ResyncBackup succeeded, or it
  // never was lost).
  bool backed_up() const {
    return has_backup_ && !backup_lost_.load() && !catching_up_.load();
  }
  // When the backup was lost (it could not be reached, or it restarted without the copy),
  // sends it every key whole - value, version, push counts, optimizer slot - after the
  // optimizer, and takes it back as the backup once it holds them all: the range is then
  // tolerant to one more fault. Rounds go on meanwhile (their updates follow the snapshots).
  // Tries at most every 2 s of options().clock, doubling to 8 s while they fail; the
  // deadline thread calls it.
  void ResyncBackup() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether this primary lost its backup for the current job (it then keeps one copy).
  bool backup_lost() const { return backup_lost_.load(); }
  // Hands the copy of this server's primary's keys over (ReplicaStore::TakeOver), fencing
  // that primary: its updates are refused from now on.
  absl::StatusOr<ReplicaStore::Handover> HandOverBackup(const std::string& job_id, uint64_t view,
                                                        int index = -1)
      ABSL_LOCKS_EXCLUDED(replica_mu_);
  // Whether this server may hold a copy of server index `index`'s keys: its left neighbour's
  // (the ring), or its own (sent back by the server that took them over while it was gone).
  bool MayBackUp(int index) const;
  // Whether its backup took its keys over (a failover): it then refuses every request of the
  // job with ABORTED, so a primary that was frozen or cut off cannot serve a stale value.
  bool fenced() const { return fenced_.load(); }

  // The command channel. `stop` is the daemon's business and is not handled here.
  absl::StatusOr<CommandReply> Command(const CommandRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  const ServerStoreOptions& options() const { return options_; }
  // The job's workers connected now (sessions that said Hello and have not ended).
  int connected_workers() const ABSL_LOCKS_EXCLUDED(mu_);

  // Fails the waiters of rounds and barriers open longer than round_timeout, as of
  // options().clock. The deadline thread calls it; with watch_deadlines off, the owner does.
  void CheckDeadlines() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    Session* session = nullptr;
    uint64_t id = 0;
  };
  struct PendingPull {
    Waiter waiter;
    int rank = 0;
    // dist_sync: answered once rounds_done >= round (and the value is on the backup);
    // dist_async: once the backup holds the key's version `round`.
    int64_t round = 0;
    bool shared = false;  // answered in the worker's slot
    bool ack_only = false;  // a dist_async push's acknowledgement, not a value
    // A replacement's first pull (PullRequest.after_push): the value before round
    // `before_round` was applied, answered once round before_round - 1 is done (0: none).
    int64_t before_round = 0;
  };
  struct ParkedPush {
    Waiter waiter;
    int rank = 0;
    uint64_t seq = 0;  // ArrayChunk.seq
    std::vector<std::string> pieces;  // empty when the push is in the worker's slot
    std::string packed;  // the push as sent, when compressed (ReplicatePushes)
    uint64_t bytes = 0;  // in pieces
    bool then_pull = false;  // a PushPull: becomes a pending pull once accepted
    bool shared = false;     // the push is in the worker's slot (and so is the answer)
  };
  // One key's part. `shape` is fixed at Init; the rest is guarded by `mu` when the store's
  // lock is held shared, and by the store's lock alone when it is held exclusively.
  struct Key {
    explicit Key(int num_workers)
        : round(num_workers), taken(num_workers, 0), in_round(num_workers), packed(num_workers) {}
    // Taken after the store's lock, never before it. Not ABSL_GUARDED_BY on the fields: the
    // analysis cannot express "mu, or the store's lock exclusively".
    Mutex mu;
    Shape shape;
    NDArray value;   // float32 CPU, the key's part
    NDArray merged;  // dist_sync: the open round's sum; dist_async: the push
    SyncRound round;                // dist_sync
    // Per rank: the highest ArrayChunk.seq of its pushes taken (applied, in a round, or
    // parked), and (dist_sync) the newest of them in a round, with that round.
    struct InRound {
      uint64_t seq = 0;
      int64_t round = 0;
    };
    std::vector<uint64_t> taken;
    std::vector<InRound> in_round;
    // dist_sync: per rank, its push into the open round as it was sent when it came
    // compressed and there is a backup (empty otherwise), which ReplicatePushes sends the
    // backup instead of the sum.
    std::vector<std::string> packed;
    std::deque<ParkedPush> parked;  // second pushes into the open round
    std::vector<PendingPull> pulls;
    // Changes of the value (its Init is 0; then one per round or dist_async push), and the
    // newest the backup acknowledged (-1: not even the Init).
    int64_t version = 0;
    int64_t replicated = -1;
    uint64_t pushes = 0;  // the workers' pushes summed into the value (KeyCounters.pushes)
    absl::Time round_opened;  // when the open round's first push came
    std::optional<KeySlots> shared;  // for same-host workers
    // dist_sync, in a job that replaces lost workers: the value before the newest round was
    // applied (round `previous_round`), which a replacement of a worker lost after pushing
    // into that round computes its gradients from (PullRequest.after_push).
    std::vector<char> previous;
    int64_t previous_round = 0;
  };

  void Greet(Session* s, uint64_t id, const Hello& hello) ABSL_LOCKS_EXCLUDED(mu_);
  // `pieces`: the request's payload in chunk order, exactly the header's size in all.
  void Init(Session* s, uint64_t id, const ArrayChunk& header, std::vector<std::string> pieces)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Push(Session* s, uint64_t id, const ArrayChunk& header, std::vector<std::string> pieces)
      ABSL_LOCKS_EXCLUDED(mu_);
  void PushPull(Session* s, uint64_t id, const ArrayChunk& header, std::vector<std::string> pieces)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Push and PushPull: `then_pull` answers with the value instead of an acknowledgement.
  void AcceptPush(Session* s, uint64_t id, const ArrayChunk& header,
                  std::vector<std::string> pieces, bool then_pull) ABSL_LOCKS_EXCLUDED(mu_);
  void Pull(Session* s, uint64_t id, const PullRequest& pull) ABSL_LOCKS_EXCLUDED(mu_);
  void MapKey(Session* s, uint64_t id, const MapKeyRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // A Hello's gradient compression: one the server runs, and (unless it starts a new job) the
  // job's; INVALID_ARGUMENT / FAILED_PRECONDITION naming the rank.
  absl::Status CheckCompression(const Hello& hello, bool new_job) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A compressed push's payload (ArrayChunk.compressed) as the float32 values it stands for.
  absl::Status Decompress(ArrayChunk* header, std::vector<std::string>* pieces,
                          std::string* packed) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker's state after one of its batches (WorkerMessage.stash), and its return to the
  // rank's replacement.
  void Stash(Session* s, uint64_t id, const ArrayChunk& header, std::vector<std::string> pieces)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unstash(Session* s, uint64_t id, const UnstashRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  void Barrier(Session* s, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers the barrier's waiters with `status` (OK: it opened); they leave it.
  void AnswerBarrier(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `s`'s stream ended (`why`); s->leaving_ says whether on purpose.
  void Leave(Session* s, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // The key `key_id`; NOT_FOUND naming `what` and the key when it is not initialized.
  absl::StatusOr<Key*> LookUp(const char* what, int key_id) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Checks a request against the key it names; INVALID_ARGUMENT/NOT_FOUND naming both.
  absl::StatusOr<Key*> FindKey(const char* what, const ArrayChunk& header)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckSession(const Session* s) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // The helpers below that take a Key need mu_ shared and key.mu, or mu_ exclusively.
  // A push's bytes: its received pieces, or (`shared`) the rank's slot.
  static SyncRound::Payload Payload(const Key& key, int rank, std::vector<std::string> pieces,
                                    bool shared);
  // Answers a push that `rank` sent again (its seq is taken already) as the first was
  // answered, without applying it.
  void AnswerResent(Session* s, uint64_t id, int key_id, Key& key, uint64_t seq, bool then_pull,
                    bool shared) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Answers a dist_async push applied to `key` (an acknowledgement, or with `then_pull` the
  // value) once the backup holds the key's current version.
  void AnswerAsyncPush(Session* s, uint64_t id, int key_id, Key& key, bool then_pull, bool shared)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops `key`'s parked pushes of session `of` (null: all), which were not taken after all;
  // they are answered with `why` (OK: not answered, their worker is gone).
  void DropParked(Key& key, const Session* of, const absl::Status& why)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Takes a push into the open round (dist_sync).
  void AcceptSyncPush(Key& key, int rank, std::vector<std::string> pieces, std::string packed,
                      bool shared)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Per rank: whether it pushed into `key`'s open round or waits in the barrier.
  std::vector<char> Joined(const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Completes `key`'s open round if every live worker pushed or waits in the barrier.
  absl::Status MaybeCompleteRound(int key_id, Key& key) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Applies `grad` to the key's value: the optimizer, or a copy.
  absl::Status Apply(int key_id, Key& key, const NDArray& grad) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The key's value as pull reply chunks for request `id`, or (`shared`) written to `rank`'s
  // slot and answered by a header.
  std::vector<ServerMessage> PullReply(uint64_t id, int key_id, const Key& key, int rank,
                                       bool shared) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The same of `data` (the key's part: its value, or the value it held before a round).
  std::vector<ServerMessage> PullReply(uint64_t id, int key_id, const Key& key, int rank,
                                       bool shared, const char* data)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Replies of request `id` carrying `total` bytes as chunks of `header`, whole values (4
  // bytes, or 2 of a bfloat16 pull) in each: `fill` sets a chunk's data to the bytes
  // [offset, offset + n).
  using ChunkFill = absl::FunctionRef<void(ArrayChunk* chunk, uint64_t offset, uint64_t n)>;
  std::vector<ServerMessage> ChunkedReply(uint64_t id, const ArrayChunk& header, uint64_t total,
                                          ChunkFill fill) const;
  // The same of `total` bytes at `data`, copied.
  std::vector<ServerMessage> ChunkedReply(uint64_t id, const ArrayChunk& header, const char* data,
                                          uint64_t total) const;
  // The answer to a replacement's pull `p` (before_round > 0) once Ready: the value before
  // that round, or FAILED_PRECONDITION when it is gone.
  std::vector<ServerMessage> RejoinPullReply(int key_id, const Key& key, const PendingPull& p)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Answers ready pulls; fails the ones a departed worker blocks.
  void ServePulls(int key_id, Key& key) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether waiter `p` of `key` may be answered now.
  bool Ready(const Key& key, const PendingPull& p) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether the backup holds `key` at `version` (or there is no backup to wait for).
  bool Replicated(const Key& key, int64_t version) const {
    return !has_backup_ || backup_lost_.load() || key.replicated >= version;
  }
  // One ResyncBackup's snapshots still unacknowledged.
  struct Resync {
    std::atomic<int> left{0};
    std::atomic<bool> failed{false};
  };
  // Sends the backup version `key.version` of the key: `sent` is its Init's value or the
  // gradient that version applies (sent before the primary applies it, so both apply it at
  // once), or with `snapshot` the key's value and optimizer slot. dist_sync: the value holds
  // `rounds` rounds. A copy of `sent` is sent; LendMerged sends the merge buffer itself.
  // `resync` (null: none) counts its acknowledgement.
  void Replicate(int key_id, Key& key, const NDArray& sent, int64_t rounds,
                 bool snapshot = false, std::shared_ptr<Resync> resync = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Replicate of the gradient in `key.merged`, without a copy: the buffer goes to the link,
  // and the key gets a fresh one (RenewMerged, once the update is applied) for what comes next.
  // Returns the fresh buffer; none when there is no backup to send to or none could be made
  // (then a copy was sent).
  std::optional<NDArray> LendMerged(int key_id, Key& key, int64_t rounds)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sends the backup the update of version `key.version` as the compressed pushes it sums
  // (`pushes`: rank and bytes as sent, ascending ranks) when they came compressed and weigh
  // less than its float32 gradient; false (nothing sent) otherwise.
  bool ReplicatePushes(int key_id, Key& key, int64_t rounds,
                       const std::vector<std::pair<int, const std::string*>>& pushes)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sends rank `rank`'s `stash` to the backup (nothing waits for its acknowledgement: a
  // replacement after a failover finds at worst the batch before, or its state from the start
  // of the run if both were lost with the primary).
  void ReplicateStash(int rank, const WorkerStash& stash) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sends `message` with `payload`; its acknowledgement serves `key_id`'s waiters (-1: none)
  // and counts for `resync` (null: none).
  void SendReplica(ReplicaMessage message, ReplicaLink::Payload payload, int key_id,
                   int64_t version, std::shared_ptr<Resync> resync = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The resync's snapshots are all on the backup: pulls wait for it again, and the caught_up
  // marker follows the updates sent meanwhile.
  void CatchUp() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether changes go to the backup: it holds the copy, or a resync is bringing it up to date.
  bool Sending() const {
    return has_backup_ && (!backup_lost_.load() || resyncing_.load());
  }
  // The ReplicaMessage of version `key.version` of the key, without its value's data.
  ReplicaMessage ReplicaUpdate(int key_id, const Key& key, int64_t rounds, bool snapshot) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The primary failed to apply an update it had sent the backup: the copies differ now.
  void Diverged(int key_id, const absl::Status& why);
  // Sends the optimizer the store now runs to the backup.
  void ReplicateOptimizer(std::shared_ptr<Resync> resync = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What every replica message of the current job carries.
  ReplicaMessage ReplicaHeader() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // The backup's answer to version `version` of `key_id` (sent in job `epoch`).
  void OnReplicaAck(int key_id, int64_t version, uint64_t epoch, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  void LoseBackup(const absl::Status& why);
  // The backup refused an update because it took this server's keys over: fails every
  // waiting request with `why` and refuses the job's requests from now on.
  void Fence(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Acknowledges a push or an Init once the value holding it is on the backup (dist_sync:
  // once round `round` is done and replicated; dist_async and Init: once version `round` is
  // replicated), so that what a worker saw acknowledged survives the primary's loss.
  void AckWhenReplicated(Session* s, uint64_t id, int key_id, Key& key, int64_t round)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void FailBlockedBy(int rank, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fail the waiters of rounds (each key locked in turn) and of a barrier (under the store's
  // lock exclusively) open longer than round_timeout (CheckDeadlines).
  void FailOverdueRounds(absl::Time now) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void FailOverdueBarrier(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WatchDeadlines() ABSL_LOCKS_EXCLUDED(mu_, watchdog_mu_);
  // Answers a waiting pull or parked push, which stops counting against its worker's bounds.
  static void Answer(const PendingPull& p, std::vector<ServerMessage> replies);
  static void Answer(const ParkedPush& p, std::vector<ServerMessage> replies);
  // Whether session `s` may add a waiting request of `parked_bytes`; RESOURCE_EXHAUSTED
  // naming the key and request otherwise.
  absl::Status CheckWaitingBound(const Session* s, int key_id, uint64_t id,
                                 uint64_t parked_bytes) const;
  // Replies go out under the store's lock (and the key's), so a waiter's session is alive
  // (Leave drops its waiters under the store's lock exclusively) and one key's replies to a
  // worker keep their order.
  static void Reply(const Waiter& w, std::vector<ServerMessage> replies) {
    w.session->send_(std::move(replies));
  }
  bool sync() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return members_.mode() == SYNC_MODE_SYNC; }

  const Runtime rt_;
  const ServerStoreOptions options_;
  ServerMetrics& metrics_;

  // Not absl::Mutex, for TSan (optimizer.h says why); writer-preferring, so a worker's
  // barrier or departure is not held back by the others' streams of pushes.
  mutable SharedMutex mu_;
  Membership members_ ABSL_GUARDED_BY(mu_);  // the job, its ranks, the barrier
  std::map<int, Key> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<Session*> sessions_ ABSL_GUARDED_BY(mu_);  // per rank: its live session
  Mutex watchdog_mu_;
  bool stopping_ ABSL_GUARDED_BY(watchdog_mu_) = false;
  CondVar watchdog_cv_;  // stopping_ became true
  // WatchDeadlines, unless watch_deadlines is off; last member: starts after the others exist.
  std::thread watchdog_;
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  OptimizerSpec optimizer_spec_ ABSL_GUARDED_BY(mu_);  // what optimizer_ was made from
  SlotBudget slot_budget_ ABSL_GUARDED_BY(mu_);
  // Per rank, its newest two stashed states (WorkerMessage.stash) by batch, oldest first
  // (KeepStash); replicated to the backup with the keys.
  std::vector<std::deque<WorkerStash>> stashes_ ABSL_GUARDED_BY(mu_);
  // The job's gradient compression, as its first Hello here said (unset before it).
  std::optional<GradientCompression> compression_ ABSL_GUARDED_BY(mu_);
  // Counts the jobs served, so that an acknowledgement of the last job's update is ignored.
  uint64_t job_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Set at construction, destroyed first at destruction (its threads call OnReplicaAck, which
  // reads only has_backup_ and backup_peer_).
  std::unique_ptr<ReplicaLink> backup_;
  const bool has_backup_;
  const std::string backup_peer_;
  std::atomic<bool> backup_lost_{false};  // for the current job
  std::atomic<bool> fenced_{false};
  std::atomic<bool> resyncing_{false};
  std::atomic<bool> catching_up_{false};  // resynced; the caught_up marker not yet acknowledged
  std::atomic<bool> resync_spoiled_{false};  // an update failed during the resync
  std::atomic<int64_t> resync_wait_ms_{2'000};  // between tries: 2 s, doubling to 8 s
  absl::Time last_resync_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status fenced_why_ ABSL_GUARDED_BY(mu_);
  mutable Mutex replica_mu_;
  // The copies this server holds, by the server index whose parts they are.
  std::map<int, ReplicaStore> replicas_ ABSL_GUARDED_BY(replica_mu_);
};

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_SERVER_STORE_H_

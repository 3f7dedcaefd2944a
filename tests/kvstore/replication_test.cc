// A primary ServerStore and its backup, joined by a link that carries the primary's updates
// on a thread of its own to the backup's ReplicaSession (the gRPC link is tested with real
// servers in tests/server/replication_grpc_test.cc). The link can hold its deliveries, so a
// test sees what waits for the backup, and can lose the backup.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/kvstore_metrics.h"
#include "kvstore/optimizer.h"
#include "kvstore/server_store.h"
#include "prometheus/registry.h"
#include "tests/kvstore/store_worker.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

// Delivers updates to `backup` in chunks of 8 bytes, in order, from its own thread.
class ThreadLink : public ReplicaLink {
 public:
  explicit ThreadLink(ServerStore* backup)
      : session_(backup->OpenReplicaSession()), thread_([this] { Run(); }) {}
  ~ThreadLink() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  void Send(ReplicaMessage update, Payload payload, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(update), std::move(payload), std::move(done)});
    cv_.notify_all();
  }
  const std::string& peer() const override { return peer_; }

  // Deliveries wait until Release.
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  // From now on every update fails as an unreachable backup's would.
  void Break() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }
  // The backup answers again (it came back).
  void Mend() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = false;
  }
  int queued() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(queue_.size());
  }

 private:
  void Run() {
    uint64_t next_id = 1;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && (!held_ || broken_)); });
      if (stopping_) return;
      auto [update, payload, done] = std::move(queue_.front());
      queue_.pop_front();
      // The lent bytes as they are when they go (held deliveries go rounds later): a store
      // that wrote into them meanwhile would show in the tests' bit-for-bit copies.
      if (update.has_value()) update.mutable_value()->set_data(std::string(payload.bytes));
      const bool broken = broken_;
      lock.unlock();
      absl::Status status = absl::UnavailableError("the backup is unreachable");
      if (!broken) {
        for (ReplicaMessage& m : SplitReplicaUpdate(std::move(update), next_id++, 8)) {
          if (std::optional<ReplicaAck> ack = session_->Handle(std::move(m))) {
            status = absl::Status(static_cast<absl::StatusCode>(ack->code()), ack->message());
          }
        }
      }
      done(status);
      lock.lock();
    }
  }

  const std::string peer_ = "in-process backup";
  std::unique_ptr<ServerStore::ReplicaSession> session_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Queued {
    ReplicaMessage update;
    Payload payload;
    Done done;
  };
  std::deque<Queued> queue_;
  bool held_ = false;
  bool broken_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the rest exists
};

class ReplicationTest : public ::testing::Test {
 protected:
  // Server 0 of 2 (the primary of its keys) and server 1 (their backup); `hello` sets what
  // else the workers' Hellos say.
  void Start(int num_workers, SyncMode mode, const std::function<void(Hello&)>& hello = nullptr) {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    ServerStoreOptions options;
    options.num_servers = 2;
    options.num_workers = num_workers;
    options.metrics = &metrics_;
    options.watch_deadlines = false;
    options.server_index = 1;
    backup_ = std::make_unique<ServerStore>(owned_->get(), options);
    auto link = std::make_unique<ThreadLink>(backup_.get());
    link_ = link.get();
    options.server_index = 0;
    primary_ = std::make_unique<ServerStore>(owned_->get(), options, std::move(link));
    for (int w = 0; w < num_workers; ++w) {
      workers_.push_back(std::make_unique<StoreWorker>(*primary_, w, num_workers, mode, 0, hello));
    }
  }
  void TearDown() override {
    workers_.clear();
    primary_.reset();
    backup_.reset();
  }
  void InitEverywhere(int key, const std::vector<float>& value) {
    for (auto& w : workers_) {
      w->Send(true, key, value);
      EXPECT_EQ(w->Next().code(), 0);
    }
  }
  // The backup's copy of `key` once it is at `version` (waits up to 10 s).
  ReplicaStore::Copy CopyAt(int key, uint64_t version) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (true) {
      absl::StatusOr<ReplicaStore::Copy> part = backup_->BackupCopy(key);
      if ((part.ok() && part->version >= version) || absl::Now() > deadline) {
        EXPECT_THAT(part.status(), IsOk());
        EXPECT_EQ(part.ok() ? part->version : 0, version);
        return part.ok() ? *part : ReplicaStore::Copy();
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  static std::vector<float> Floats(const std::string& bytes) {
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }

  prometheus::Registry registry_;
  ServerMetrics metrics_ = NewServerMetrics(registry_);
  std::unique_ptr<OwnedRuntime> owned_;
  std::unique_ptr<ServerStore> backup_;
  std::unique_ptr<ServerStore> primary_;
  ThreadLink* link_ = nullptr;  // owned by primary_
  std::vector<std::unique_ptr<StoreWorker>> workers_;
};

TEST_F(ReplicationTest, ADistSyncPullIsAnsweredOnlyOnceTheBackupHoldsItsRound) {
  Start(2, SYNC_MODE_SYNC);
  InitEverywhere(3, {1, 2, 3});
  EXPECT_EQ(Floats(CopyAt(3, 0).value), (std::vector<float>{1, 2, 3}));
  link_->Hold();
  const uint64_t push = workers_[0]->Numbered(3, {1, 1, 1}, 1, /*push_pull=*/false);
  workers_[1]->Numbered(3, {2, 2, 2}, 1, /*push_pull=*/false);
  const uint64_t pull = workers_[0]->Pull(3);
  // The round is complete on the primary, but its value is not on the backup yet: neither
  // its pushes (a push acknowledged must survive the primary) nor its pulls are answered.
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(50)));
  EXPECT_FALSE(workers_[1]->AwaitReplies(1, absl::Milliseconds(20)));
  EXPECT_EQ(link_->queued(), 1);
  link_->Release();
  std::map<uint64_t, StoreWorker::Answer> answers = workers_[0]->Collect({push, pull});
  EXPECT_EQ(answers[push].code, 0);
  EXPECT_EQ(answers[pull].value, (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  const ReplicaStore::Copy copy = CopyAt(3, 1);
  EXPECT_EQ(Floats(copy.value), (std::vector<float>{3, 3, 3}));
  const uint64_t push_pull = workers_[1]->Numbered(3, {5, 5, 5}, 2, /*push_pull=*/true);
  EXPECT_EQ(copy.taken, (std::vector<uint64_t>{1, 1}));
  EXPECT_FALSE(workers_[1]->AwaitReplies(1, absl::Milliseconds(20)));  // its round 2 is open
  workers_[0]->Numbered(3, {1, 1, 1}, 2, /*push_pull=*/false);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[1]->ValueOf(push_pull), (std::vector<float>{6, 6, 6}));
  EXPECT_EQ(CopyAt(3, 2).taken, (std::vector<uint64_t>{2, 2}));
}

// The round's sum goes to the link without a copy: the next round's pushes, summed while the
// backup has not got it yet, must land in another buffer (with an optimizer, and without one,
// where the sum becomes the value and the old value the next merge buffer).
TEST_F(ReplicationTest, ARoundsSumOnItsWayIsNotOverwrittenByTheNextRounds) {
  for (const bool optimizer : {true, false}) {
    SCOPED_TRACE(optimizer ? "sgd" : "no optimizer");
    TearDown();
    workers_.clear();
    Start(2, SYNC_MODE_SYNC);
    if (optimizer) {
      CommandRequest command;
      command.mutable_set_optimizer()->set_name("sgd");
      (*command.mutable_set_optimizer()->mutable_params())["learning_rate"] = "0.5";
      ASSERT_THAT(primary_->Command(command).status(), IsOk());
    }
    InitEverywhere(0, {1, 1});
    CopyAt(0, 0);
    link_->Hold();
    // Rounds 1 and 2 complete, and round 3 opens, before the backup has round 1 (so no push
    // is acknowledged yet).
    for (uint64_t round = 1; round <= 3; ++round) {
      for (int w = 0; w < (round == 3 ? 1 : 2); ++w) {
        workers_[w]->Numbered(0, {static_cast<float>(round), static_cast<float>(w)}, round,
                              /*push_pull=*/false);
      }
    }
    EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(20)));
    link_->Release();
    for (int w = 0; w < 2; ++w) {  // rounds 1 and 2; round 3 is open
      for (int round = 1; round <= 2; ++round) ASSERT_EQ(workers_[w]->Next().code(), 0);
    }
    const std::vector<float> after_two = workers_[1]->PullValue(0);  // rank 1 is at round 2
    EXPECT_EQ(Floats(CopyAt(0, 2).value), after_two);
    // The sums are {2, 1} and {4, 1}: sgd (lr 0.5) goes {1, 1} -> {0, 0.5} -> {-2, 0}.
    EXPECT_EQ(after_two, (optimizer ? std::vector<float>{-2, 0} : std::vector<float>{4, 1}));
  }
}

TEST_F(ReplicationTest, AnAsyncPushIsAcknowledgedOnlyOnceTheBackupHoldsIt) {
  Start(1, SYNC_MODE_ASYNC);
  InitEverywhere(0, {0, 0});
  CopyAt(0, 0);
  link_->Hold();
  workers_[0]->Numbered(0, {4, 5}, 1, /*push_pull=*/false);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(50)));
  // Sent again meanwhile (a new stream would): not applied again, and not answered early.
  workers_[0]->Numbered(0, {4, 5}, 1, /*push_pull=*/false);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(20)));
  link_->Release();
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  const ReplicaStore::Copy copy = CopyAt(0, 1);
  EXPECT_EQ(Floats(copy.value), (std::vector<float>{4, 5}));
  EXPECT_EQ(copy.taken, (std::vector<uint64_t>{1}));
}

TEST_F(ReplicationTest, ALostBackupLeavesOneCopyAndTheJobGoesOn) {
  Start(2, SYNC_MODE_SYNC);
  InitEverywhere(1, {0});
  CopyAt(1, 0);
  link_->Hold();
  const uint64_t push = workers_[0]->Send(false, 1, {1});
  workers_[1]->Send(false, 1, {2});
  const uint64_t pull = workers_[0]->Pull(1);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(20)));
  link_->Break();
  std::map<uint64_t, StoreWorker::Answer> answers = workers_[0]->Collect({push, pull});
  EXPECT_EQ(answers[push].code, 0);
  EXPECT_EQ(answers[pull].value, (std::vector<float>{3}));
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_TRUE(primary_->backup_lost());
  EXPECT_EQ(metrics_.backup_losses.Value(), 1);
  // Later rounds are not sent at all, and their pulls do not wait.
  workers_[0]->Send(false, 1, {1});
  workers_[1]->Send(false, 1, {1});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[1]->PullValue(1), (std::vector<float>{2}));
  EXPECT_EQ(link_->queued(), 0);
  EXPECT_EQ(backup_->BackupCopy(1)->version, 0u);
}

// A failover at the store level: the backup hands its copy over in view 1 while a round is
// open on the primary; the primary's next update is refused, which fences it (its waiting
// requests and every later one fail with ABORTED), and a store that takes the copy over
// finishes the round with the pushes sent again - each applied once - to the value a
// never-failing store reaches.
TEST_F(ReplicationTest, ATakeoverFencesTheOldPrimaryAndFinishesItsRoundOnce) {
  Start(2, SYNC_MODE_SYNC);
  CommandRequest command;
  command.mutable_set_optimizer()->set_name("sgd");
  (*command.mutable_set_optimizer()->mutable_params())["learning_rate"] = "0.5";
  (*command.mutable_set_optimizer()->mutable_params())["momentum"] = "0.9";
  ASSERT_THAT(primary_->Command(command).status(), IsOk());
  ServerStoreOptions reference_options;
  reference_options.num_workers = 2;
  reference_options.watch_deadlines = false;
  ServerStore reference(owned_->get(), reference_options);
  std::vector<std::unique_ptr<StoreWorker>> oracle;
  for (int w = 0; w < 2; ++w) {
    oracle.push_back(std::make_unique<StoreWorker>(reference, w, 2, SYNC_MODE_SYNC));
  }
  ASSERT_THAT(reference.Command(command).status(), IsOk());
  for (int w = 0; w < 2; ++w) {
    oracle[w]->Send(true, 4, {1, 2, 3});
    ASSERT_EQ(oracle[w]->Next().code(), 0);
  }
  InitEverywhere(4, {1, 2, 3});
  auto gradient = [](int w, uint64_t round) {
    return std::vector<float>{0.25f * w + 0.5f * round, -1.f * w, 0.125f * round};
  };
  // Round 1 everywhere; round 2 opens on the primary with rank 0's push only.
  for (int w = 0; w < 2; ++w) {
    workers_[w]->Numbered(4, gradient(w, 1), 1, false);
    oracle[w]->Numbered(4, gradient(w, 1), 1, false);
  }
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(workers_[w]->Next().code(), 0);
    ASSERT_EQ(oracle[w]->Next().code(), 0);
  }
  const uint64_t open = workers_[0]->Numbered(4, gradient(0, 2), 2, /*push_pull=*/true);
  link_->Hold();

  absl::StatusOr<ReplicaStore::Handover> handover = backup_->HandOverBackup("", 1);
  ASSERT_THAT(handover.status(), IsOk());
  EXPECT_THAT(backup_->HandOverBackup("", 2).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("took them over already")));
  ServerStoreOptions taker_options;
  taker_options.server_index = 0;
  taker_options.num_servers = 2;
  taker_options.num_workers = 2;
  taker_options.watch_deadlines = false;
  absl::StatusOr<std::unique_ptr<ServerStore>> taker =
      ServerStore::TakeOver(owned_->get(), taker_options, *std::move(handover));
  ASSERT_THAT(taker.status(), IsOk());

  // The old primary completes round 2 (rank 1's push), but the backup refuses it.
  workers_[1]->Numbered(4, gradient(1, 2), 2, /*push_pull=*/true);
  link_->Release();
  for (int w = 0; w < 2; ++w) {
    const ServerMessage refused = workers_[w]->Next();
    EXPECT_EQ(refused.code(), static_cast<int>(absl::StatusCode::kAborted)) << refused.message();
    EXPECT_THAT(refused.message(), HasSubstr("fenced"));
  }
  (void)open;
  EXPECT_TRUE(primary_->fenced());
  workers_[0]->Pull(4);  // a stale primary serves nothing more
  EXPECT_EQ(workers_[0]->Next().code(), static_cast<int>(absl::StatusCode::kAborted));

  // The workers move to the taker in view 1 and send round 2 again; a resent round 1 push is
  // answered without being applied.
  std::vector<std::unique_ptr<StoreWorker>> moved;
  for (int w = 0; w < 2; ++w) {
    moved.push_back(std::make_unique<StoreWorker>(**taker, w, 2, SYNC_MODE_SYNC, /*view=*/1));
  }
  moved[0]->Numbered(4, gradient(0, 1), 1, false);
  EXPECT_EQ(moved[0]->Next().code(), 0);
  const uint64_t a = moved[0]->Numbered(4, gradient(0, 2), 2, /*push_pull=*/true);
  const uint64_t b = moved[1]->Numbered(4, gradient(1, 2), 2, /*push_pull=*/true);
  const uint64_t ra = oracle[0]->Numbered(4, gradient(0, 2), 2, /*push_pull=*/true);
  oracle[1]->Numbered(4, gradient(1, 2), 2, /*push_pull=*/true);
  const std::vector<float> expected = oracle[0]->ValueOf(ra);
  EXPECT_EQ(moved[0]->ValueOf(a), expected);
  EXPECT_EQ(moved[1]->ValueOf(b), expected);
  EXPECT_EQ(moved[0]->hello().view(), 1u);

  // The key's counters went over with the copy: two rounds of two pushes, each push once -
  // as the server without a failover counts them.
  CommandRequest count;
  count.set_round_counters(true);
  ASSERT_OK_AND_ASSIGN(const CommandReply counted, (*taker)->Command(count));
  ASSERT_OK_AND_ASSIGN(const CommandReply without_failover, reference.Command(count));
  ASSERT_EQ(counted.counters_size(), 1);
  const KeyCounters& c = counted.counters(0);
  EXPECT_EQ(c.key(), 4);
  EXPECT_EQ(c.version(), 2u);
  EXPECT_EQ(c.pushes(), 4u);
  EXPECT_THAT(c.taken(), ::testing::ElementsAre(2u, 2u));
  EXPECT_EQ(c.SerializeAsString(), without_failover.counters(0).SerializeAsString());
}

// The workers' stashed states (a job that replaces workers) go to the backup with the keys:
// after a failover the taker holds each rank's newest two, and a replacement of a worker
// continues from its predecessor's state there.
TEST_F(ReplicationTest, AWorkersStashedStateSurvivesAFailover) {
  Start(2, SYNC_MODE_SYNC, [](Hello& hello) { hello.set_replace_workers(true); });
  InitEverywhere(4, {1, 2, 3});
  auto stash = [&](int w, uint64_t batch, const std::vector<float>& state) {
    workers_[w]->SendAs(&WorkerMessage::mutable_stash, 0, state, /*chunk=*/2, batch);
    return workers_[w]->Next();
  };
  for (uint64_t batch = 1; batch <= 3; ++batch) {
    ASSERT_EQ(stash(0, batch, {1.f * static_cast<float>(batch), 5, 6}).code(), 0);
  }
  ASSERT_EQ(stash(1, 1, {7}).code(), 0);
  // A round is answered once the backup holds it, and the link keeps the order: by then the
  // backup holds the stashes sent before it.
  const uint64_t a = workers_[0]->Numbered(4, {1, 1, 1}, 1, /*push_pull=*/true);
  const uint64_t b = workers_[1]->Numbered(4, {1, 1, 1}, 1, /*push_pull=*/true);
  EXPECT_EQ(workers_[0]->ValueOf(a), workers_[1]->ValueOf(b));

  ASSERT_OK_AND_ASSIGN(ReplicaStore::Handover handover, backup_->HandOverBackup("", 1));
  ServerStoreOptions taker_options;
  taker_options.server_index = 0;
  taker_options.num_servers = 2;
  taker_options.num_workers = 2;
  taker_options.watch_deadlines = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ServerStore> taker,
                       ServerStore::TakeOver(owned_->get(), taker_options, std::move(handover)));
  workers_[0]->Close();
  StoreWorker replacement(*taker, 0, 2, SYNC_MODE_SYNC, /*view=*/1, [](Hello& hello) {
    hello.set_replace_workers(true);
    hello.set_rejoin(true);
  });
  auto unstash = [&](uint64_t batch) {
    WorkerMessage m;
    m.set_id(1000 + batch);
    m.mutable_unstash()->set_batch(batch);
    replacement.Handle(m);
    return m.id();
  };
  EXPECT_EQ(replacement.ValueOf(unstash(3)), std::vector<float>({3, 5, 6}));
  EXPECT_EQ(replacement.ValueOf(unstash(2)), std::vector<float>({2, 5, 6}));
  unstash(1);
  const ServerMessage gone = replacement.Next();
  EXPECT_EQ(gone.code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(gone.message(), HasSubstr("holds its batches 2, 3"));
}

// A backup lost for some rounds, then back: the primary sends it every key whole (value,
// version, push counts, optimizer slot) while rounds go on, then takes it back as its backup -
// pulls wait for it again - and its copy continues the primary's bits.
TEST_F(ReplicationTest, ABackupThatComesBackIsBroughtUpToDateWhileRoundsGoOn) {
  Start(2, SYNC_MODE_SYNC);
  CommandRequest command;
  command.mutable_set_optimizer()->set_name("sgd");
  (*command.mutable_set_optimizer()->mutable_params())["learning_rate"] = "0.25";
  (*command.mutable_set_optimizer()->mutable_params())["momentum"] = "0.5";
  ASSERT_THAT(primary_->Command(command).status(), IsOk());
  InitEverywhere(0, {1, 2});
  InitEverywhere(1, {3});
  CopyAt(1, 0);
  auto round = [&](uint64_t r) {
    for (int w = 0; w < 2; ++w) {
      workers_[w]->Numbered(0, {0.5f * r, static_cast<float>(w)}, r, false);
      workers_[w]->Numbered(1, {1.f * w - r}, r, false);
    }
    for (int w = 0; w < 2; ++w) {
      for (int k = 0; k < 2; ++k) ASSERT_EQ(workers_[w]->Next().code(), 0) << "round " << r;
    }
  };
  round(1);
  link_->Break();
  round(2);
  round(3);
  EXPECT_TRUE(primary_->backup_lost());
  EXPECT_EQ(backup_->BackupCopy(0)->version, 1u);  // the rounds since went nowhere
  link_->Mend();
  link_->Hold();
  primary_->ResyncBackup();
  EXPECT_FALSE(primary_->backed_up());  // not before the backup holds every key
  round(4);                             // goes on meanwhile, its update after the snapshots
  link_->Release();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!primary_->backed_up() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(primary_->backed_up());
  round(5);  // acknowledged only once on the backup again
  for (int k = 0; k < 2; ++k) {
    const ReplicaStore::Copy copy = CopyAt(k, 5);
    EXPECT_EQ(Floats(copy.value), workers_[0]->PullValue(k)) << "key " << k;
    EXPECT_EQ(copy.taken, (std::vector<uint64_t>{5, 5}));
  }
}

// Random pushes of three workers into several keys, with an optimizer that keeps state: after
// every round the backup holds the primary's value bit for bit, and the optimizer slot it
// holds continues the primary's updates exactly.
// Compressed pushes reach the backup as the workers sent them (W/16 of the gradient's bytes
// in 2-bit), and the backup's sum of them, in rank order, is the primary's bit for bit: its
// copy equals what the workers pull after every round, through an optimizer with momentum.
void ExpectCompressedUpdatesReachTheBackupBitForBit(
    const GradientCompression& compression, SyncMode mode,
    std::vector<std::unique_ptr<StoreWorker>>& workers, ServerStore& primary, ServerStore& backup,
    ServerMetrics& metrics) {
  constexpr int kKeys = 3;
  constexpr int kRounds = 8;
  const int num_workers = static_cast<int>(workers.size());
  auto size_of = [](int k) { return 5 + 61 * k; };  // 5, 66, 127 values: partial words
  CommandRequest command;
  command.mutable_set_optimizer()->set_name("sgd");
  (*command.mutable_set_optimizer()->mutable_params())["learning_rate"] = "0.1";
  (*command.mutable_set_optimizer()->mutable_params())["momentum"] = "0.9";
  ASSERT_THAT(primary.Command(command).status(), IsOk());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto random_values = [&](int n) {
    std::vector<float> v(n);
    for (float& x : v) x = uniform(rng);
    return v;
  };
  double bytes = 0;  // what the backup should have been sent
  for (int k = 0; k < kKeys; ++k) {
    for (auto& w : workers) {
      w->Send(true, k, random_values(size_of(k)));
      ASSERT_EQ(w->Next().code(), 0);
    }
    bytes += size_of(k) * sizeof(float);
  }
  for (int round = 1; round <= kRounds; ++round) {
    std::vector<int> order(num_workers);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int k = 0; k < kKeys; ++k) {
      for (int w : order) {
        workers[w]->CompressedPush(k, random_values(size_of(k)), compression, round);
      }
      const uint64_t packed = internal::CompressedBytes(compression, size_of(k));
      const uint64_t floats = size_of(k) * sizeof(float);
      const int pushes_per_update = mode == SYNC_MODE_SYNC ? num_workers : 1;
      // What a replica update carries: the pushes as sent, or the float32 gradient where
      // they would weigh more.
      const uint64_t each = pushes_per_update * packed < floats ? pushes_per_update * packed
                                                                : floats;
      bytes += static_cast<double>(each) * (mode == SYNC_MODE_SYNC ? 1 : num_workers);
    }
    for (int w = 0; w < num_workers; ++w) {
      for (int k = 0; k < kKeys; ++k) ASSERT_EQ(workers[w]->Next().code(), 0);
    }
    for (int k = 0; k < kKeys; ++k) {
      const std::vector<float> pulled = workers[order[0]]->PullValue(k);
      absl::StatusOr<ReplicaStore::Copy> copy = backup.BackupCopy(k);
      ASSERT_THAT(copy.status(), IsOk());
      const uint64_t version = mode == SYNC_MODE_SYNC ? round : round * num_workers;
      EXPECT_EQ(copy->version, version);
      std::vector<float> held(copy->value.size() / sizeof(float));
      std::memcpy(held.data(), copy->value.data(), copy->value.size());
      EXPECT_EQ(held, pulled) << compression.type() << ", key " << k << ", round " << round;
    }
  }
  EXPECT_EQ(metrics.replica_bytes.Value(), bytes);
  EXPECT_EQ(metrics.backup_losses.Value(), 0);
}

TEST_F(ReplicationTest, TwoBitRoundsReachTheBackupAsTheirPushesBitForBit) {
  GradientCompression two_bit;
  two_bit.set_type("2bit");
  two_bit.set_threshold(0.5f);
  Start(3, SYNC_MODE_SYNC, [&](Hello& h) { *h.mutable_compression() = two_bit; });
  ExpectCompressedUpdatesReachTheBackupBitForBit(two_bit, SYNC_MODE_SYNC, workers_, *primary_,
                                                 *backup_, metrics_);
}

TEST_F(ReplicationTest, HalfPrecisionRoundsOfThreeWorkersReachTheBackupAsTheirSum) {
  // fp16 pushes of 3 workers weigh 1.5 times the float32 sum: the sum goes instead.
  GradientCompression fp16;
  fp16.set_type("fp16");
  Start(3, SYNC_MODE_SYNC, [&](Hello& h) { *h.mutable_compression() = fp16; });
  ExpectCompressedUpdatesReachTheBackupBitForBit(fp16, SYNC_MODE_SYNC, workers_, *primary_,
                                                 *backup_, metrics_);
}

TEST_F(ReplicationTest, AnAsyncCompressedPushReachesTheBackupAsSent) {
  GradientCompression two_bit;
  two_bit.set_type("2bit");
  two_bit.set_threshold(0.5f);
  Start(2, SYNC_MODE_ASYNC, [&](Hello& h) { *h.mutable_compression() = two_bit; });
  ExpectCompressedUpdatesReachTheBackupBitForBit(two_bit, SYNC_MODE_ASYNC, workers_, *primary_,
                                                 *backup_, metrics_);
}

TEST_F(ReplicationTest, TheBackupHoldsEveryRoundBitForBit) {
  constexpr int kWorkers = 3;
  constexpr int kKeys = 4;
  constexpr int kRounds = 12;
  Start(kWorkers, SYNC_MODE_SYNC);
  CommandRequest command;
  command.mutable_set_optimizer()->set_name("sgd");
  (*command.mutable_set_optimizer()->mutable_params())["learning_rate"] = "0.1";
  (*command.mutable_set_optimizer()->mutable_params())["momentum"] = "0.9";
  ASSERT_THAT(primary_->Command(command).status(), IsOk());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto random_values = [&](int n) {
    std::vector<float> v(n);
    for (float& x : v) x = uniform(rng);
    return v;
  };
  for (int k = 0; k < kKeys; ++k) InitEverywhere(k, random_values(5 + k));
  for (int round = 1; round <= kRounds; ++round) {
    std::vector<int> order = {0, 1, 2};
    std::shuffle(order.begin(), order.end(), rng);
    for (int k = 0; k < kKeys; ++k) {
      for (int w : order) workers_[w]->Numbered(k, random_values(5 + k), round, false);
    }
    // Each push is acknowledged once its round is on the backup.
    for (int w = 0; w < kWorkers; ++w) {
      for (int k = 0; k < kKeys; ++k) ASSERT_EQ(workers_[w]->Next().code(), 0);
    }
    for (int k = 0; k < kKeys; ++k) {
      const std::vector<float> pulled = workers_[order[0]]->PullValue(k);
      // A pull is answered only once the backup holds its round: no waiting needed here.
      absl::StatusOr<ReplicaStore::Copy> copy = backup_->BackupCopy(k);
      ASSERT_THAT(copy.status(), IsOk());
      EXPECT_EQ(copy->version, static_cast<uint64_t>(round));
      EXPECT_EQ(Floats(copy->value), pulled) << "key " << k << ", round " << round;
      EXPECT_EQ(copy->taken, std::vector<uint64_t>(kWorkers, round));
    }
  }
  // Every update acknowledged once, and counted on both sides: the optimizer, kKeys Inits
  // and a round of each key per round.
  const double updates = 1 + kKeys + kKeys * kRounds;
  EXPECT_EQ(metrics_.replica_updates.Value(), updates);
  EXPECT_EQ(metrics_.backup_updates.Value(), updates);
  EXPECT_EQ(metrics_.replica_seconds.Collect().histogram.sample_count, updates);
  double floats = 0;
  for (int k = 0; k < kKeys; ++k) floats += (5 + k) * (1 + kRounds);
  EXPECT_EQ(metrics_.replica_bytes.Value(), floats * sizeof(float));
  EXPECT_EQ(metrics_.backup_losses.Value(), 0);
  // The slot the backup holds, loaded into a fresh optimizer, continues as the primary does.
  const int key = 2;
  absl::StatusOr<ReplicaStore::Copy> copy = backup_->BackupCopy(key);
  ASSERT_THAT(copy.status(), IsOk());
  ASSERT_FALSE(copy->optimizer_slot.empty());
  absl::StatusOr<std::unique_ptr<Optimizer>> fresh =
      Optimizer::Create("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}});
  ASSERT_THAT(fresh.status(), IsOk());
  ASSERT_THAT((*fresh)->LoadSlot(owned_->get(), key, copy->optimizer_slot), IsOk());
  EXPECT_EQ((*fresh)->update_count(key), kRounds);
  const std::vector<float> grad = random_values(5 + key);
  const std::vector<float> start = Floats(copy->value);
  absl::StatusOr<NDArray> weight =
      FromVector<float>(owned_->get(), Shape({5 + key}), absl::MakeConstSpan(start));
  absl::StatusOr<NDArray> g =
      FromVector<float>(owned_->get(), Shape({5 + key}), absl::MakeConstSpan(grad));
  ASSERT_THAT(weight.status(), IsOk());
  ASSERT_THAT(g.status(), IsOk());
  ASSERT_THAT((*fresh)->Update(key, *weight, *g), IsOk());
  for (int w = 0; w < kWorkers; ++w) {
    workers_[w]->Numbered(key, w == 0 ? grad : std::vector<float>(5 + key, 0.f), kRounds + 1,
                          /*push_pull=*/false);
  }
  for (int w = 0; w < kWorkers; ++w) ASSERT_EQ(workers_[w]->Next().code(), 0);
  std::vector<float> continued(5 + key);
  ASSERT_THAT(weight->SyncCopyToCPU(continued.data(), 5 + key), IsOk());
  EXPECT_EQ(continued, workers_[0]->PullValue(key));
}

}  // namespace
}  // namespace tessera::kvstore

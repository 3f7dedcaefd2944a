// ReplicaStore and ReplicaReceiver: a backup's copy takes its primary's updates in order,
// whole, and refuses every malformed or out-of-place one without changing anything.
#include "kvstore/internal/replica_store.h"

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/cluster_spec.h"
#include "kvstore/internal/compression.h"
#include "kvstore/internal/sync_round.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

// Server 1 of 3 backs up server 0.
constexpr int kBackup = 1;
constexpr int kServers = 3;

ReplicaMessage Update(int key, uint64_t version, const std::vector<float>& value,
                      const std::string& job = "job-a") {
  ReplicaMessage m;
  m.set_job_id(job);
  m.set_primary(0);
  m.set_mode(SYNC_MODE_SYNC);
  m.set_num_workers(2);
  m.set_version(version);
  m.mutable_value()->set_key(key);
  m.mutable_value()->set_dtype(DT_FLOAT32);
  m.mutable_value()->add_shape(static_cast<int64_t>(value.size()));
  m.mutable_value()->set_data(value.data(), value.size() * sizeof(float));
  m.mutable_value()->set_last(true);
  m.add_taken(version);
  m.add_taken(version);
  return m;
}

const Runtime& rt() {
  static const std::unique_ptr<OwnedRuntime> owned =
      tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  return owned->get();
}

std::vector<float> ValueOf(const ReplicaStore::Copy& part) {
  std::vector<float> v(part.value.size() / sizeof(float));
  std::memcpy(v.data(), part.value.data(), part.value.size());
  return v;
}

TEST(ReplicaStoreTest, UpdatesReplaceTheCopyInOrderAndResendsChangeNothing) {
  ReplicaStore store(rt(), kBackup, kServers);
  ASSERT_THAT(store.Apply(Update(7, 0, {1, 2})), IsOk());
  ASSERT_THAT(store.Apply(Update(7, 1, {3, 4})), IsOk());
  ASSERT_THAT(store.Apply(Update(7, 1, {9, 9})), IsOk());  // a resend: acknowledged, not applied
  ASSERT_THAT(store.Apply(Update(7, 0, {9, 9})), IsOk());  // an Init sent again, likewise
  absl::StatusOr<ReplicaStore::Copy> part = store.Find(7);
  ASSERT_THAT(part.status(), IsOk());
  EXPECT_EQ(ValueOf(*part), (std::vector<float>{3, 4}));
  EXPECT_EQ(part->version, 1u);
  EXPECT_EQ(part->taken, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(store.job_id(), "job-a");
}

TEST(ReplicaStoreTest, RefusalsNameWhatIsWrongAndChangeNothing) {
  ReplicaStore store(rt(), kBackup, kServers);
  ASSERT_THAT(store.Apply(Update(7, 0, {1, 2})), IsOk());
  ReplicaMessage m = Update(7, 1, {3, 4});
  m.set_primary(2);
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("this copy on server 1 is of server 0's keys")));
  EXPECT_THAT(store.Apply(Update(8, 1, {1})),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("replica of key 8")));
  EXPECT_THAT(store.Apply(Update(7, 1, {1, 2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("value float32 (3,) but the copy is float32 (2,)")));
  EXPECT_THAT(store.Apply(Update(7, 3, {3, 4})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("at version 0, so version 1 was lost")));
  m = Update(7, 1, {3, 4});
  m.mutable_value()->mutable_data()->resize(4);
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("4 bytes at offset 0 for a value of 8")));
  m = Update(7, 1, {3, 4});
  m.set_num_workers(3);
  m.add_taken(1);
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("with 2 workers, the update says")));
  m = Update(7, 1, {3, 4});
  m.set_num_workers(kMaxClusterProcesses + 1);  // refused before anything is allocated
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("needs a worker count (1 to 65536; got 65537)")));
  m = Update(7, 1, {3, 4});
  m.clear_taken();
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("0 push counts for 2 workers")));
  m = Update(7, 1, {3, 4});
  m.mutable_value()->set_dtype(DT_FLOAT16);
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("a replica is float32")));
  EXPECT_THAT(store.Apply(Update(7, 1, {3, 4}, "job-b")),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("its copy is of job 'job-a'")));
  absl::StatusOr<ReplicaStore::Copy> part = store.Find(7);
  ASSERT_THAT(part.status(), IsOk());
  EXPECT_EQ(ValueOf(*part), (std::vector<float>{1, 2}));
  EXPECT_EQ(part->version, 0u);
}

// An update as the round's compressed pushes (ReplicaMessage.push_ranks): the copy gets the
// gradient the primary summed, bit for bit - the pushes decompressed and added in rank order
// by SyncRound, a rank that did not push (it joined) left out - through chunks of any size;
// malformed ones are refused naming what is wrong, and change nothing.
TEST(ReplicaStoreTest, AnUpdateAsItsCompressedPushesIsTheirSumBitForBit) {
  constexpr int kWorkers = 4;
  constexpr int64_t kN = 1000;  // not a whole number of 2-bit words
  GradientCompression two_bit;
  two_bit.set_type("2bit");
  two_bit.set_threshold(0.25f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const std::vector<int> ranks = {0, 2, 3};  // rank 1 joined
  std::vector<std::string> packed;
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<float> grad(kN), residual(kN);
    for (float& g : grad) g = uniform(rng);
    for (float& r : residual) r = 0.1f * uniform(rng);  // a worker's earlier rounds
    packed.emplace_back(internal::CompressedBytes(two_bit, kN), '\0');
    internal::CompressPush(two_bit, grad.data(), residual.data(), kN, packed.back().data());
  }
  // The primary's sum: the pushes as they arrive (3, 0, 2), summed in rank order.
  std::vector<float> sum(kN);
  SyncRound round(kWorkers);
  for (size_t i : {2, 0, 1}) {
    SyncRound::Payload payload;
    payload.pieces.emplace_back(kN * sizeof(float), '\0');
    internal::DecompressPush(two_bit, packed[i].data(), kN,
                             reinterpret_cast<float*>(payload.pieces.back().data()));
    round.Accept(ranks[i], std::move(payload), sum.data());
  }
  ASSERT_TRUE(round.Ready({0, 1, 0, 0}, sum.data()));

  auto init = [] {
    ReplicaMessage m = Update(5, 0, std::vector<float>(kN, 0.f));
    m.set_num_workers(kWorkers);
    m.clear_taken();
    for (int r = 0; r < kWorkers; ++r) m.add_taken(0);
    return m;
  };
  auto as_pushes = [&] {
    ReplicaMessage m = init();
    m.set_version(1);
    m.mutable_value()->set_compressed(true);
    m.mutable_value()->clear_data();
    for (size_t i = 0; i < ranks.size(); ++i) {
      m.add_push_ranks(ranks[i]);
      *m.mutable_value()->mutable_data() += packed[i];
    }
    *m.mutable_compression() = two_bit;
    return m;
  };
  // No optimizer: the copy takes the gradient as its value, as the primary does.
  ReplicaStore store(rt(), kBackup, kServers);
  ASSERT_THAT(store.Apply(init()), IsOk());
  ReplicaReceiver receiver(kBackup, 1 << 20);
  std::optional<ReplicaReceiver::Whole> whole;
  for (ReplicaMessage& chunk : SplitReplicaUpdate(as_pushes(), 9, 100)) {
    absl::StatusOr<std::optional<ReplicaReceiver::Whole>> got = receiver.Add(std::move(chunk));
    ASSERT_THAT(got.status(), IsOk());
    if (got->has_value()) whole = **got;
  }
  ASSERT_TRUE(whole.has_value());
  ASSERT_THAT(store.Apply(whole->update, whole->pieces), IsOk());
  const std::vector<float> held = ValueOf(*store.Find(5));
  ASSERT_EQ(held.size(), sum.size());
  EXPECT_EQ(std::memcmp(held.data(), sum.data(), sizeof(float) * kN), 0);

  ReplicaStore other(rt(), kBackup, kServers);
  ASSERT_THAT(other.Apply(init()), IsOk());
  ReplicaMessage m = as_pushes();
  m.mutable_value()->mutable_data()->pop_back();
  EXPECT_THAT(other.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("for 3 pushes of 1000 values in 2bit (252 bytes each)")));
  m = as_pushes();
  m.set_push_ranks(1, 0);
  EXPECT_THAT(other.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("push ranks must ascend within the job's 4 workers; got 0, 0, 3")));
  m = as_pushes();
  m.mutable_value()->set_dtype(DT_FLOAT16);
  EXPECT_THAT(other.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("compressed pushes stand for float32 values")));
  m = as_pushes();
  m.mutable_compression()->set_type("1bit");
  EXPECT_THAT(other.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("pushes compressed by '1bit'")));
  m = as_pushes();
  m.set_version(0);  // an Init (here of another key) comes as its value
  m.mutable_value()->set_key(6);
  EXPECT_THAT(other.Apply(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("only an update of a key held")));
  EXPECT_EQ(ValueOf(*other.Find(5)), std::vector<float>(kN, 0.f));
  EXPECT_EQ(other.Find(5)->version, 0u);
}

// A worker's stashed state (ReplicaMessage.stash_batch): each rank's newest two are kept, a
// replacement's stash of a batch replaces the ones from there on, and a takeover hands them
// over; a rank outside the job or bytes that are no float32 values are refused.
TEST(ReplicaStoreTest, WorkersStashesAreKeptAndHandedOver) {
  ReplicaStore store(rt(), kBackup, kServers);
  ASSERT_THAT(store.Apply(Update(7, 0, {1, 2})), IsOk());
  auto stash = [](int rank, uint64_t batch, const std::vector<float>& state) {
    ReplicaMessage m = Update(0, 0, state);
    m.set_stash_rank(rank);
    m.set_stash_batch(batch);
    return m;
  };
  for (uint64_t batch = 1; batch <= 4; ++batch) {
    ASSERT_THAT(store.Apply(stash(0, batch, {1.0f * static_cast<float>(batch)})), IsOk());
  }
  ASSERT_THAT(store.Apply(stash(0, 4, {40})), IsOk());  // a replacement's batch 4
  ASSERT_THAT(store.Apply(stash(1, 2, {7, 8})), IsOk());
  EXPECT_THAT(store.Apply(stash(2, 1, {1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("replica of worker 2's state after batch 1 (job 'job-a') from server 0: "
                                 "the job has ranks 0 to 1")));
  ReplicaMessage odd = stash(1, 3, {1});
  odd.mutable_value()->mutable_data()->resize(3);
  EXPECT_THAT(store.Apply(odd), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("3 bytes are no float32 values")));
  ASSERT_OK_AND_ASSIGN(ReplicaStore::Handover handover, store.TakeOver("job-a", 1));
  ASSERT_EQ(handover.stashes.size(), 2u);
  auto held = [&](int rank) {
    std::vector<std::pair<uint64_t, std::vector<float>>> out;
    for (const WorkerStash& s : handover.stashes[rank]) {
      std::vector<float> v(s.bytes->size() / sizeof(float));
      std::memcpy(v.data(), s.bytes->data(), s.bytes->size());
      out.emplace_back(s.batch, v);
    }
    return out;
  };
  using Held = std::vector<std::pair<uint64_t, std::vector<float>>>;
  EXPECT_EQ(held(0), (Held{{3, {3}}, {4, {40}}}));
  EXPECT_EQ(held(1), (Held{{2, {7, 8}}}));
}

// With the primary's optimizer, each update is the gradient the primary applied: the copy
// runs it through its own optimizer and holds the same bits as an optimizer on the primary.
TEST(ReplicaStoreTest, UpdatesRunThroughTheReplicatedOptimizer) {
  ReplicaStore store(rt(), kBackup, kServers);
  ReplicaMessage optimizer;
  optimizer.set_job_id("job-a");
  optimizer.set_primary(0);
  optimizer.set_mode(SYNC_MODE_SYNC);
  optimizer.set_num_workers(2);
  optimizer.mutable_optimizer()->set_name("sgd");
  (*optimizer.mutable_optimizer()->mutable_params())["learning_rate"] = "0.5";
  (*optimizer.mutable_optimizer()->mutable_params())["momentum"] = "0.9";
  ASSERT_THAT(store.Apply(optimizer), IsOk());
  ASSERT_THAT(store.Apply(Update(7, 0, {1, 2})), IsOk());
  ASSERT_THAT(store.Apply(Update(7, 1, {1, 1})), IsOk());
  ASSERT_THAT(store.Apply(Update(7, 2, {1, 1})), IsOk());
  // The primary's side, the same calls in the same order.
  absl::StatusOr<std::unique_ptr<Optimizer>> sgd =
      Optimizer::Create("sgd", {{"learning_rate", "0.5"}, {"momentum", "0.9"}});
  ASSERT_THAT(sgd.status(), IsOk());
  const std::vector<float> start = {1, 2}, grad = {1, 1};
  NDArray weight = *FromVector<float>(rt(), Shape({2}), absl::MakeConstSpan(start));
  NDArray g = *FromVector<float>(rt(), Shape({2}), absl::MakeConstSpan(grad));
  ASSERT_THAT((*sgd)->Update(7, weight, g), IsOk());
  ASSERT_THAT((*sgd)->Update(7, weight, g), IsOk());
  absl::StatusOr<ReplicaStore::Copy> copy = store.Find(7);
  ASSERT_THAT(copy.status(), IsOk());
  EXPECT_EQ(ValueOf(*copy), *weight.AsVector<float>());
  EXPECT_EQ(copy->optimizer_slot, *(*sgd)->SaveSlot(7));
  // A snapshot replaces value and slot whole, at the primary's version.
  ReplicaMessage snapshot = Update(7, 5, {3, 3});
  snapshot.set_snapshot(true);
  snapshot.set_optimizer_slot(*(*sgd)->SaveSlot(7));
  ASSERT_THAT(store.Apply(snapshot), IsOk());
  copy = store.Find(7);
  EXPECT_EQ(ValueOf(*copy), (std::vector<float>{3, 3}));
  EXPECT_EQ(copy->version, 5u);
  snapshot.set_version(4);
  EXPECT_THAT(store.Apply(snapshot), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              HasSubstr("at version 5 already")));
  optimizer.mutable_optimizer()->set_name("no-such-optimizer");
  EXPECT_THAT(store.Apply(optimizer), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("replica of the optimizer")));
}

TEST(ReplicaStoreTest, AnOlderViewIsRefused) {
  ReplicaStore store(rt(), kBackup, kServers);
  ReplicaMessage m = Update(7, 0, {1});
  m.set_view(2);
  ASSERT_THAT(store.Apply(m), IsOk());
  m = Update(7, 1, {2});
  m.set_view(1);
  EXPECT_THAT(store.Apply(m), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("view 1 is older than view 2")));
  EXPECT_EQ(store.Find(7)->version, 0u);
}

TEST(ReplicaStoreTest, AnotherJobsInitStartsItsCopyAfresh) {
  ReplicaStore store(rt(), kBackup, kServers);
  ASSERT_THAT(store.Apply(Update(7, 0, {1})), IsOk());
  ASSERT_THAT(store.Apply(Update(8, 0, {2}, "job-b")), IsOk());
  EXPECT_THAT(store.Find(7).status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(store.Find(8).status(), IsOk());
  EXPECT_EQ(store.job_id(), "job-b");
}

TEST(ReplicaStoreTest, ASingleServerBacksUpNobody) {
  ReplicaStore store(rt(), 0, 1);
  EXPECT_THAT(store.Apply(Update(7, 0, {1})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("itself")));
}

TEST(ReplicaReceiverTest, ChunksOfAnUpdateComeBackWhole) {
  std::vector<float> value(10);
  for (int i = 0; i < 10; ++i) value[i] = static_cast<float>(i) + 0.5f;
  ReplicaMessage update = Update(3, 4, value);
  // A slot longer than the value: messages past the value's end carry only slot bytes.
  const std::string slot = "an optimizer slot of 50 bytes, longer than 40 ....";
  ASSERT_EQ(slot.size(), 50u);
  update.set_optimizer_slot(slot);
  std::vector<ReplicaMessage> chunks = SplitReplicaUpdate(update, 42, 12);
  ASSERT_EQ(chunks.size(), 5u);  // value 12 + 12 + 12 + 4 + 0, slot 12 + 12 + 12 + 12 + 2
  EXPECT_EQ(chunks[0].optimizer_slot(), slot.substr(0, 12));
  EXPECT_TRUE(chunks[4].value().data().empty());
  EXPECT_EQ(chunks[4].value().offset(), 40u);
  ReplicaReceiver receiver(kBackup, 1 << 20);
  std::optional<ReplicaReceiver::Whole> whole;
  for (size_t i = 0; i < chunks.size(); ++i) {
    absl::StatusOr<std::optional<ReplicaReceiver::Whole>> got = receiver.Add(chunks[i]);
    ASSERT_THAT(got.status(), IsOk());
    EXPECT_EQ(got->has_value(), i + 1 == chunks.size());
    if (got->has_value()) whole = **got;
  }
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->update.id(), 42u);
  EXPECT_EQ(whole->update.version(), 4u);
  EXPECT_EQ(whole->update.optimizer_slot(), slot);
  std::string data;
  for (const std::string& piece : whole->pieces) data += piece;
  EXPECT_EQ(data, update.value().data());
  // Applied from its pieces, the copy holds the value sent.
  ReplicaStore store(rt(), kBackup, kServers);
  ReplicaMessage init = whole->update;
  init.set_version(0);
  ASSERT_THAT(store.Apply(init, whole->pieces), IsOk());
  EXPECT_EQ(ValueOf(*store.Find(3)), value);
}

TEST(ReplicaReceiverTest, AChunkThatDoesNotContinueItsUpdateIsRefused) {
  std::vector<ReplicaMessage> chunks = SplitReplicaUpdate(Update(3, 0, {1, 2, 3}), 5, 4);
  ReplicaReceiver receiver(kBackup, 1 << 20);
  ASSERT_THAT(receiver.Add(chunks[0]).status(), IsOk());
  chunks[1].mutable_value()->set_offset(8);
  EXPECT_THAT(receiver.Add(chunks[1]).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("replica update 5 of 3: request 5: a chunk for key 3")));
  // The rest of the refused update is dropped; the next one is taken.
  absl::StatusOr<std::optional<ReplicaReceiver::Whole>> last = receiver.Add(chunks[2]);
  ASSERT_THAT(last.status(), IsOk());
  EXPECT_FALSE(last->has_value());
  std::vector<ReplicaMessage> next = SplitReplicaUpdate(Update(3, 0, {1}), 6, 4);
  absl::StatusOr<std::optional<ReplicaReceiver::Whole>> got = receiver.Add(next[0]);
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_TRUE(got->has_value());
}

// A takeover moves the copy out whole - values, versions, push counts - for serving in a
// newer view, and fences the primary: its next update is ABORTED and changes nothing, while
// another job's Init starts a copy afresh.
TEST(ReplicaStoreTest, ATakeoverHandsTheCopyOverAndFencesThePrimary) {
  ReplicaStore store(rt(), kBackup, kServers);
  ASSERT_THAT(store.Apply(Update(7, 0, {1, 2})), IsOk());
  ASSERT_THAT(store.Apply(Update(7, 1, {3, 4})), IsOk());
  EXPECT_THAT(store.TakeOver("job-b", 1).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no copy of job 'job-b'")));
  EXPECT_THAT(store.TakeOver("job-a", 0).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not newer")));
  absl::StatusOr<ReplicaStore::Handover> h = store.TakeOver("job-a", 1);
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_EQ(h->job_id, "job-a");
  EXPECT_EQ(h->view, 1u);
  EXPECT_EQ(h->num_workers, 2);
  ASSERT_EQ(h->parts.count(7), 1u);
  EXPECT_EQ(h->parts[7].version, 1u);
  EXPECT_EQ(h->parts[7].taken, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(*h->parts[7].value.AsVector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(store.taken_over_in(), 1u);
  EXPECT_THAT(store.Apply(Update(7, 2, {5, 6})),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("is fenced")));
  EXPECT_THAT(store.TakeOver("job-a", 2).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already")));
  ASSERT_THAT(store.Apply(Update(3, 0, {8}, "job-c")), IsOk());
  EXPECT_EQ(store.taken_over_in(), 0u);
  EXPECT_EQ(ValueOf(*store.Find(3)), (std::vector<float>{8}));
}

// A resync's snapshot leaves the copy incomplete - the updates whose values workers saw may
// still be on their way - until the primary's caught_up marker: a takeover before it is
// refused (no complete copy is left), after it allowed.
TEST(ReplicaStoreTest, ACopyBeingBroughtUpToDateIsNotTakenOver) {
  ReplicaStore store(rt(), kBackup, kServers);
  ReplicaMessage snapshot = Update(7, 12, {5, 6});
  snapshot.set_snapshot(true);
  ASSERT_THAT(store.Apply(snapshot), IsOk());  // starts the job's copy
  EXPECT_THAT(store.TakeOver("job-a", 1).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no complete copy")));
  ASSERT_THAT(store.Apply(Update(7, 13, {7, 8})), IsOk());
  ReplicaMessage marker = Update(0, 0, {});
  marker.clear_value();
  marker.set_caught_up(true);
  EXPECT_THAT(store.Apply(marker), IsOk());
  absl::StatusOr<ReplicaStore::Handover> h = store.TakeOver("job-a", 1);
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_EQ(h->parts[7].version, 13u);
  // A marker of a job it holds no copy of is refused.
  ReplicaStore fresh(rt(), kBackup, kServers);
  EXPECT_THAT(fresh.Apply(marker), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace tessera::kvstore

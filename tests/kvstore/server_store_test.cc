// ServerStore without a transport: sessions driven directly, replies collected per worker.
// Covers the round logic under concurrency (a randomized test against the round oracle,
// also run under ThreadSanitizer by ./tessera test, which gRPC tests cannot be: Debian's
// gRPC is not instrumented), chunk reassembly, and a departure while a round is open.
#include "kvstore/internal/two_bit.h"
#include "kvstore/server_store.h"

#include <algorithm>
#include <condition_variable>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "core/shared_memory.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/kvstore_metrics.h"
#include "prometheus/registry.h"
#include "tests/kvstore/store_worker.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ServerStoreTest : public ::testing::Test {
 protected:
  void Start(int num_workers, SyncMode mode, uint64_t max_chunk_bytes = 1 << 20,
             absl::Duration round_timeout = absl::Seconds(120),
             const std::function<void(ServerStoreOptions&)>& configure = nullptr,
             const std::function<void(Hello&)>& hello = nullptr) {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    ServerStoreOptions options;
    options.num_workers = num_workers;
    options.max_chunk_bytes = max_chunk_bytes;
    options.round_timeout = round_timeout;
    if (configure) configure(options);
    store_ = std::make_unique<ServerStore>(owned_->get(), options);
    for (int w = 0; w < num_workers; ++w) {
      workers_.push_back(std::make_unique<StoreWorker>(*store_, w, num_workers, mode, 0, hello));
    }
  }
  void TearDown() override {
    workers_.clear();
    store_.reset();
  }
  // Every worker sends Init, as the trainers do (the first value wins).
  void InitEverywhere(int key, const std::vector<float>& value) {
    for (auto& w : workers_) {
      w->Send(true, key, value);
      EXPECT_EQ(w->Next().code(), 0);
    }
  }

  std::unique_ptr<OwnedRuntime> owned_;
  std::unique_ptr<ServerStore> store_;
  std::vector<std::unique_ptr<StoreWorker>> workers_;
};

TEST_F(ServerStoreTest, ChunkedPushesAndPullsReassembleExactly) {
  Start(1, SYNC_MODE_SYNC, /*max_chunk_bytes=*/12);  // pull replies of 3 floats each
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[i] = static_cast<float>(i) * 1.5f;
  workers_[0]->Send(true, 4, v, /*chunk=*/4);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->PullValue(4), v);
  std::vector<float> g(10, 2.f);
  workers_[0]->Send(false, 4, g, /*chunk=*/3);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->PullValue(4), g);  // no optimizer: the round's sum is the value
}

TEST_F(ServerStoreTest, AStreamHoldsBoundedPartialRequestsAndStaysUsable) {
  Start(1, SYNC_MODE_ASYNC, 1 << 20, absl::Seconds(120), [](ServerStoreOptions& o) {
    o.max_session_staged_bytes = 40;  // 10 floats
    o.max_session_staged_requests = 2;
  });
  StoreWorker& w = *workers_[0];
  InitEverywhere(0, std::vector<float>(8, 0.f));
  // Two pushes of 8 floats half received, a third refused by count.
  w.PushChunk(100, 0, 8, 0, std::vector<float>(4, 1.f), false);
  w.PushChunk(101, 0, 8, 0, std::vector<float>(4, 2.f), false);
  w.PushChunk(102, 0, 8, 0, std::vector<float>(4, 3.f), false);
  ServerMessage r = w.Next();
  EXPECT_EQ(r.id(), 102u);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(r.message(), HasSubstr("takes at most 2"));
  // 100's next chunks would hold 44 bytes in all: it fails, and its later chunks are dropped.
  w.PushChunk(100, 0, 8, 4, std::vector<float>(1, 1.f), false);  // 36 bytes held: fine
  w.PushChunk(100, 0, 8, 5, std::vector<float>(2, 1.f), false);
  r = w.Next();
  EXPECT_EQ(r.id(), 100u);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(r.message(), HasSubstr("holds at most 40 per worker"));
  w.PushChunk(100, 0, 8, 7, std::vector<float>(1, 1.f), true);
  EXPECT_FALSE(w.HasReply());
  // What was freed serves the rest: 101 completes, and its value is what was pushed.
  w.PushChunk(101, 0, 8, 4, std::vector<float>(4, 2.f), true);
  r = w.Next();
  EXPECT_EQ(r.id(), 101u);
  EXPECT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(w.PullValue(0), std::vector<float>(8, 2.f));
}

// A worker may hold 2 waiting requests and 24 bytes of parked or incoming pushes here; beyond
// either its request is refused, the stream goes on, and answered requests free the room.
TEST_F(ServerStoreTest, WaitingPullsAndParkedPushesAreBoundedPerWorker) {
  Start(2, SYNC_MODE_SYNC, 1 << 20, absl::Seconds(120), [](ServerStoreOptions& o) {
    o.max_session_waiting_requests = 2;
    o.max_session_staged_bytes = 24;
  });
  InitEverywhere(0, {0, 0, 0, 0});
  StoreWorker& w0 = *workers_[0];
  w0.Send(false, 0, {1, 1, 1, 1});
  EXPECT_EQ(w0.Next().code(), 0);
  const uint64_t parked = w0.Send(false, 0, {2, 2, 2, 2});  // into round 2: parked, 16 bytes
  const uint64_t too_many_bytes = w0.Send(false, 0, {3, 3, 3, 3});
  ServerMessage r = w0.Next();
  EXPECT_EQ(r.id(), too_many_bytes);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(r.message(), HasSubstr("being received or parked to 32 bytes; server 0 holds at "
                                     "most 24 per worker"));
  const uint64_t pull = w0.Pull(0);  // waits for round 1: the second waiting request
  const uint64_t one_too_many = w0.Pull(0);
  r = w0.Next();
  EXPECT_EQ(r.id(), one_too_many);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(r.message(), HasSubstr("would be this worker's request number 3 waiting for a "
                                     "round; server 0 holds at most 2"));
  // Worker 1 completes round 1: the pull is answered and the parked push opens round 2.
  workers_[1]->Send(false, 0, {10, 10, 10, 10});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  r = w0.Next();
  EXPECT_EQ(r.id(), pull);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.pull().data(),
            std::string(reinterpret_cast<const char*>(std::vector<float>(4, 11).data()), 16));
  r = w0.Next();
  EXPECT_EQ(r.id(), parked);
  EXPECT_EQ(r.code(), 0) << r.message();
  // The room is free again: two pulls of round 2 wait, and round 2 answers both.
  w0.Pull(0);
  w0.Pull(0);
  workers_[1]->Send(false, 0, {20, 20, 20, 20});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  for (int i = 0; i < 2; ++i) {
    r = w0.Next();
    ASSERT_EQ(r.code(), 0) << r.message();
    float value = 0;
    std::memcpy(&value, r.pull().data().data(), sizeof(value));
    EXPECT_EQ(value, 22);
  }
}

TEST_F(ServerStoreTest, ASecondPushIntoAnOpenRoundWaitsForTheNextRound) {
  Start(2, SYNC_MODE_SYNC);
  InitEverywhere(0, {0});
  workers_[0]->Send(false, 0, {1});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  workers_[0]->Send(false, 0, {100});  // parked: worker 0 already pushed into round 1
  EXPECT_FALSE(workers_[0]->HasReply());
  workers_[1]->Send(false, 0, {2});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->Next().code(), 0);  // the parked push, now in round 2
  EXPECT_EQ(workers_[1]->PullValue(0), std::vector<float>{3});
  workers_[1]->Send(false, 0, {20});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>{120});
}

// Float addition is not associative: a round sums its pushes in rank order, so the value does
// not depend on the order they arrive in. ((1e8 + 1) - 1e8) + 1 is 1 in float32; other orders
// give 0 or 2.
TEST_F(ServerStoreTest, ARoundSumsItsPushesInRankOrderWhateverOrderTheyArriveIn) {
  Start(4, SYNC_MODE_SYNC);
  InitEverywhere(0, {0, 0});
  const std::vector<std::vector<float>> pushes = {{1e8f, 1}, {1, 1e8f}, {-1e8f, -1e8f}, {1, 1}};
  std::vector<int> order = {0, 1, 2, 3};
  do {
    for (int rank : order) {
      workers_[rank]->Send(false, 0, pushes[rank]);
      EXPECT_EQ(workers_[rank]->Next().code(), 0);
    }
    EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({1, 1})) << "arrival order "
        << order[0] << order[1] << order[2] << order[3];
  } while (std::next_permutation(order.begin(), order.end()));
}

// A push held until the ranks below it arrive is a copy: its worker may write its slot again
// once the push is acknowledged.
TEST_F(ServerStoreTest, AHeldPushThroughASlotIsCopiedBeforeItIsAcknowledged) {
  Start(2, SYNC_MODE_SYNC, 1 << 20, absl::Seconds(120), [](ServerStoreOptions& o) {
    o.shared_memory = true;
    o.shared_memory_min_bytes = 16;
  });
  InitEverywhere(0, {0, 0, 0, 0});
  ASSERT_THAT(workers_[1]->Map(0), IsOk());
  workers_[1]->SharedPush(0, {1, 2, 3, 4}, /*push_pull=*/false);  // held: rank 0 has not pushed
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  workers_[1]->SharedPush(0, {-9, -9, -9, -9}, /*push_pull=*/false);  // parked for round 2
  EXPECT_FALSE(workers_[1]->HasReply());
  workers_[0]->Send(false, 0, {10, 20, 30, 40});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({11, 22, 33, 44}));
}

TEST_F(ServerStoreTest, APushPullIsAnsweredWithTheValueOfTheRoundItPushedInto) {
  Start(2, SYNC_MODE_SYNC, /*max_chunk_bytes=*/8);  // 3 floats answer in 2 chunks
  InitEverywhere(0, {0, 0, 0});
  const uint64_t first = workers_[0]->PushPull(0, {1, 2, 3}, /*chunk=*/2);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(50)));  // round 1 is open
  const uint64_t second = workers_[1]->PushPull(0, {10, 20, 30});
  EXPECT_EQ(workers_[0]->ValueOf(first), std::vector<float>({11, 22, 33}));
  EXPECT_EQ(workers_[1]->ValueOf(second), std::vector<float>({11, 22, 33}));

  // A push-pull into a round its worker already pushed into waits for the next round.
  workers_[0]->Send(false, 0, {1, 1, 1});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  const uint64_t parked = workers_[0]->PushPull(0, {5, 5, 5});
  workers_[1]->Send(false, 0, {2, 2, 2});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(50)));  // now in round 3
  EXPECT_EQ(workers_[1]->PullValue(0), std::vector<float>({3, 3, 3}));
  const uint64_t last = workers_[1]->PushPull(0, {7, 7, 7});
  EXPECT_EQ(workers_[0]->ValueOf(parked), std::vector<float>({12, 12, 12}));
  EXPECT_EQ(workers_[1]->ValueOf(last), std::vector<float>({12, 12, 12}));

  // Bad input is refused naming the key, and the session goes on.
  workers_[0]->PushPull(9, {1});
  const ServerMessage refused = workers_[0]->Next();
  EXPECT_NE(refused.code(), 0);
  EXPECT_THAT(refused.message(), HasSubstr("key 9"));
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({12, 12, 12}));
}

// A worker whose stream broke sends its last push again on a new one (ArrayChunk.seq): the
// server answers it as the first was and applies it once; a number beyond the next is
// refused, naming both.
TEST_F(ServerStoreTest, APushSentAgainOnANewStreamIsAppliedOnce) {
  Start(2, SYNC_MODE_SYNC);
  InitEverywhere(0, {0});
  workers_[0]->Numbered(0, {1}, 1, /*push_pull=*/true);  // round 1 waits for worker 1
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(20)));
  workers_[0]->Close();
  workers_[0] = std::make_unique<StoreWorker>(*store_, 0, 2, SYNC_MODE_SYNC);
  const uint64_t again = workers_[0]->Numbered(0, {1}, 1, /*push_pull=*/true);
  workers_[1]->Numbered(0, {10}, 1, /*push_pull=*/false);
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->ValueOf(again), std::vector<float>({11}));  // not 12

  workers_[0]->Numbered(0, {5}, 3, /*push_pull=*/false);
  const ServerMessage gap = workers_[0]->Next();
  EXPECT_EQ(gap.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(gap.message(), AllOf(HasSubstr("key 0"), HasSubstr("worker 0's push number 3"),
                                   HasSubstr("has taken 1"), HasSubstr("was lost")));

  // A push parked for the next round and dropped with its stream is not taken: sent again,
  // it counts (were it taken for sent, round 2 would never have worker 0's push).
  workers_[0]->Numbered(0, {1}, 2, /*push_pull=*/false);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  workers_[0]->Numbered(0, {100}, 3, /*push_pull=*/false);  // parked: round 2 has worker 0's
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(20)));
  workers_[0]->Close();
  workers_[0] = std::make_unique<StoreWorker>(*store_, 0, 2, SYNC_MODE_SYNC);
  workers_[0]->Numbered(0, {1}, 2, /*push_pull=*/false);  // its round's push, sent again
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  const uint64_t third = workers_[0]->Numbered(0, {100}, 3, /*push_pull=*/true);
  workers_[1]->Numbered(0, {2}, 2, /*push_pull=*/false);
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[1]->ValueOf(workers_[1]->Numbered(0, {200}, 3, /*push_pull=*/true)),
            std::vector<float>({300}));
  EXPECT_EQ(workers_[0]->ValueOf(third), std::vector<float>({300}));
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({300}));
}

TEST_F(ServerStoreTest, AnAsyncPushSentAgainIsAppliedOnce) {
  Start(1, SYNC_MODE_ASYNC);
  InitEverywhere(0, {0});
  EXPECT_EQ(workers_[0]->ValueOf(workers_[0]->Numbered(0, {1}, 1, true)), std::vector<float>({1}));
  workers_[0]->Numbered(0, {1}, 1, false);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->ValueOf(workers_[0]->Numbered(0, {1}, 1, true)), std::vector<float>({1}));
  EXPECT_EQ(workers_[0]->ValueOf(workers_[0]->Numbered(0, {2}, 2, true)), std::vector<float>({2}));
  workers_[0]->Numbered(0, {2}, 9, false);
  EXPECT_EQ(workers_[0]->Next().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({2}));
}

TEST_F(ServerStoreTest, AnAsyncPushPullIsAnsweredWithTheValueAfterItsPush) {
  Start(2, SYNC_MODE_ASYNC);
  InitEverywhere(0, {0, 0});
  CommandRequest sgd;
  sgd.mutable_set_optimizer()->set_name("sgd");
  (*sgd.mutable_set_optimizer()->mutable_params())["learning_rate"] = "1";
  ASSERT_THAT(store_->Command(sgd), IsOk());
  EXPECT_EQ(workers_[0]->ValueOf(workers_[0]->PushPull(0, {1, 2})), std::vector<float>({-1, -2}));
  EXPECT_EQ(workers_[1]->ValueOf(workers_[1]->PushPull(0, {1, 0})), std::vector<float>({-2, -2}));
}

TEST_F(ServerStoreTest, SameHostWorkersPushAndPullThroughTheirSlots) {
  Start(2, SYNC_MODE_SYNC, 1 << 20, absl::Seconds(120), [](ServerStoreOptions& o) {
    o.shared_memory = true;
    o.shared_memory_min_bytes = 16;
  });
  EXPECT_EQ(workers_[0]->hello().shared_memory_min_bytes(), 16u);
  InitEverywhere(0, {0, 0, 0, 0});  // 16 bytes: shared
  InitEverywhere(1, {0, 0, 0});     // 12: on the stream only
  ASSERT_THAT(workers_[0]->Map(0), IsOk());
  ASSERT_THAT(workers_[1]->Map(0), IsOk());
  EXPECT_THAT(workers_[0]->Map(1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("key 1")));
  EXPECT_THAT(workers_[0]->Map(7), StatusIs(absl::StatusCode::kNotFound, HasSubstr("key 7")));

  // Worker 0 through its slot, worker 1 on the stream, into one round.
  const uint64_t a = workers_[0]->SharedPush(0, {1, 2, 3, 4}, /*push_pull=*/true);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(50)));  // round 1 is open
  const uint64_t b = workers_[1]->PushPull(0, {10, 20, 30, 40});
  EXPECT_EQ(workers_[0]->ValueOf(a), std::vector<float>({11, 22, 33, 44}));
  EXPECT_EQ(workers_[1]->ValueOf(b), std::vector<float>({11, 22, 33, 44}));

  // A push parked for the next round is read from the slot when that round opens (its worker
  // leaves the slot alone until it is answered).
  workers_[0]->SharedPush(0, {1, 1, 1, 1}, /*push_pull=*/false);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  workers_[0]->SharedPush(0, {5, 5, 5, 5}, /*push_pull=*/false);  // parked
  workers_[1]->Send(false, 0, {2, 2, 2, 2});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->Next().code(), 0);  // the parked push, now in round 3
  EXPECT_EQ(workers_[1]->ValueOf(workers_[1]->SharedPull(0)), std::vector<float>({3, 3, 3, 3}));
  workers_[1]->Send(false, 0, {7, 7, 7, 7});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({12, 12, 12, 12}));

  // What does not fit is refused naming the key, and the session goes on.
  auto refused = [&](const char* what) {
    const ServerMessage r = workers_[0]->Next();
    EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << what;
    EXPECT_THAT(r.message(), HasSubstr("key 1")) << what;
  };
  workers_[0]->SharedPush(1, {1, 1, 1}, /*push_pull=*/false);
  refused("a push of an unshared key through a slot");
  workers_[0]->SharedPull(1);
  refused("a pull of an unshared key into a slot");
  WorkerMessage with_data;
  with_data.set_id(workers_[0]->next_id() + 100);
  ArrayChunk* c = with_data.mutable_push();
  c->set_key(1);
  c->set_dtype(DT_FLOAT32);
  c->add_shape(3);
  c->set_data(std::string(12, '\0'));
  c->set_last(true);
  c->set_in_shared_memory(true);
  WorkerMessage init = with_data;
  *init.mutable_init() = with_data.push();
  init.mutable_init()->clear_data();
  init.set_id(with_data.id() + 1);
  workers_[0]->Handle(with_data);
  refused("a chunk in shared memory that carries data");
  workers_[0]->Handle(init);
  refused("an Init in shared memory");
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({12, 12, 12, 12}));
}

TEST_F(ServerStoreTest, AnAsyncPushPullThroughASlotIsAnsweredThere) {
  Start(1, SYNC_MODE_ASYNC, 1 << 20, absl::Seconds(120), [](ServerStoreOptions& o) {
    o.shared_memory = true;
    o.shared_memory_min_bytes = 8;
  });
  InitEverywhere(0, {0, 0});
  ASSERT_THAT(workers_[0]->Map(0), IsOk());
  EXPECT_EQ(workers_[0]->ValueOf(workers_[0]->SharedPush(0, {3, 4}, /*push_pull=*/true)),
            std::vector<float>({3, 4}));
  EXPECT_EQ(workers_[0]->PullValue(0), std::vector<float>({3, 4}));
}

TEST_F(ServerStoreTest, AServerWithoutSharedMemorySharesNoKey) {
  Start(1, SYNC_MODE_SYNC);
  EXPECT_EQ(workers_[0]->hello().shared_memory_min_bytes(), 0u);
  InitEverywhere(0, std::vector<float>(1 << 16, 1.f));
  EXPECT_THAT(workers_[0]->Map(0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("does not share it")));
}

TEST_F(ServerStoreTest, SharedMemoryStaysWithinItsBytesAndKeys) {
  // Each slot takes whole pages: a 4-byte key one, a 5,000-byte key two.
  auto start = [&](uint64_t max_bytes, int max_keys) {
    workers_.clear();
    store_.reset();
    Start(1, SYNC_MODE_SYNC, 1 << 20, absl::Seconds(120), [&](ServerStoreOptions& o) {
      o.shared_memory = true;
      o.shared_memory_min_bytes = 4;
      o.max_shared_memory_bytes = max_bytes;
      o.max_shared_memory_keys = max_keys;
    });
    InitEverywhere(0, {1});
    InitEverywhere(1, std::vector<float>(1250, 1.f));
    InitEverywhere(2, {1});
  };
  start(/*max_bytes=*/2 * 4096, /*max_keys=*/10);
  EXPECT_THAT(workers_[0]->Map(0), IsOk());
  EXPECT_THAT(workers_[0]->Map(1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(workers_[0]->Map(2), IsOk());
  start(/*max_bytes=*/uint64_t{1} << 30, /*max_keys=*/2);
  EXPECT_THAT(workers_[0]->Map(0), IsOk());
  EXPECT_THAT(workers_[0]->Map(1), IsOk());
  EXPECT_THAT(workers_[0]->Map(2), StatusIs(absl::StatusCode::kFailedPrecondition));
  // An unshared key still trains on the stream.
  workers_[0]->Send(false, 2, {5});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[0]->PullValue(2), std::vector<float>{5});
}

TEST_F(ServerStoreTest, ANewJobStartsAfreshOnceTheOldOnesWorkersLeft) {
  Start(1, SYNC_MODE_SYNC);  // job "" (the fixture's Hello names none)
  InitEverywhere(0, {5});
  auto hello = [&](StoreWorker& w, const std::string& job) {
    WorkerMessage m;
    m.set_id(99);
    m.mutable_hello()->set_protocol_version(kKVStoreProtocolVersion);
    m.mutable_hello()->set_num_workers(1);
    m.mutable_hello()->set_mode(SYNC_MODE_ASYNC);
    m.mutable_hello()->set_job_id(job);
    return m;
  };
  // While job ""'s worker is connected, job "b" must wait.
  std::vector<ServerMessage> replies;
  std::mutex mu;
  auto session = store_->Open([&](std::vector<ServerMessage> r) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& m : r) replies.push_back(std::move(m));
  });
  session->Handle(hello(*workers_[0], "b"));
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_THAT(replies[0].message(), HasSubstr("job 'b' must wait"));
  workers_[0]->Close();
  // Now it starts afresh: another mode is fine and key 0 is gone.
  auto fresh = store_->Open([&](std::vector<ServerMessage> r) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& m : r) replies.push_back(std::move(m));
  });
  fresh->Handle(hello(*workers_[0], "b"));
  WorkerMessage pull;
  pull.set_id(100);
  pull.mutable_pull()->set_key(0);
  fresh->Handle(pull);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[1].code(), 0) << replies[1].message();
  EXPECT_EQ(replies[2].code(), static_cast<int>(absl::StatusCode::kNotFound));
}

TEST_F(ServerStoreTest, OptimizerCommandsBelongToTheRunningJob) {
  CommandRequest set;
  set.mutable_set_optimizer()->set_name("sgd");
  (*set.mutable_set_optimizer()->mutable_params())["learning_rate"] = "0.1";
  Start(1, SYNC_MODE_SYNC);  // job "" (the fixture's Hello names none)
  InitEverywhere(0, {5});
  // Job "" runs; another job's trainer can neither replace its optimizer nor read its state.
  CommandRequest foreign = set;
  foreign.set_job_id("other-job");
  EXPECT_THAT(store_->Command(foreign),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("serves job ''"),
                             HasSubstr("command of job 'other-job' is refused"))));
  EXPECT_THAT(store_->Command(set), IsOk());
  CommandRequest save;
  save.set_save_optimizer_state(true);
  save.set_job_id("other-job");
  EXPECT_THAT(store_->Command(save), StatusIs(absl::StatusCode::kPermissionDenied));
  save.clear_job_id();
  EXPECT_THAT(store_->Command(save), IsOk());
  // Once the job's workers have left, no job's command is taken.
  workers_[0]->Close();
  EXPECT_THAT(store_->Command(set),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("runs no job")));
}

TEST_F(ServerStoreTest, DepartureFailsTheOpenRoundsPullsButNotFinishedOnes) {
  Start(2, SYNC_MODE_SYNC);
  InitEverywhere(0, {0});
  workers_[0]->Send(false, 0, {1});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  const uint64_t pull = workers_[0]->Pull(0);
  EXPECT_FALSE(workers_[0]->HasReply());
  workers_[1]->Close();
  ServerMessage r = workers_[0]->Next();
  EXPECT_EQ(r.id(), pull);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_THAT(r.message(), HasSubstr("worker 1 left server 0 (test closed it)"));
}

// A job that replaces lost workers: a worker lost after pushing into round 2 holds round 3
// up (no failure); its replacement learns how far it got, pulls the value its predecessor
// computed round 2's push from (the value before round 2, which the store kept), sends
// that push again (taken already: not applied twice) and completes round 3.
TEST_F(ServerStoreTest, AReplacedWorkerRejoinsWhereItsPredecessorWasLost) {
  const auto replace = [](Hello& hello) { hello.set_replace_workers(true); };
  Start(2, SYNC_MODE_SYNC, 1 << 20, absl::Seconds(120), nullptr, replace);
  InitEverywhere(0, {0});
  workers_[0]->Numbered(0, {1}, 1, /*push_pull=*/false);
  workers_[1]->Numbered(0, {2}, 1, /*push_pull=*/false);
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  workers_[1]->Numbered(0, {5}, 2, /*push_pull=*/false);  // round 2, then lost
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  workers_[1]->Close();
  EXPECT_EQ(workers_[0]->ValueOf(workers_[0]->Numbered(0, {10}, 2, /*push_pull=*/true)),
            std::vector<float>({15}));
  const uint64_t round3 = workers_[0]->Numbered(0, {100}, 3, /*push_pull=*/true);
  EXPECT_FALSE(workers_[0]->AwaitReplies(1, absl::Milliseconds(50))) << "waits, not fails";

  const auto rejoin = [](Hello& hello) {
    hello.set_replace_workers(true);
    hello.set_rejoin(true);
  };
  workers_[1] = std::make_unique<StoreWorker>(*store_, 1, 2, SYNC_MODE_SYNC, 0, rejoin);
  EXPECT_EQ(workers_[1]->hello().progress().barriers(), 0u);
  EXPECT_EQ(workers_[1]->hello().progress().pushes().at(0), 2u);
  // After push 1 its predecessor pulled 3 (round 1's value), from which it computed push 2.
  EXPECT_EQ(workers_[1]->ValueOf(workers_[1]->Pull(0, /*after_push=*/1)), std::vector<float>({3}));
  workers_[1]->Pull(0, /*after_push=*/0);
  const ServerMessage behind = workers_[1]->Next();
  EXPECT_EQ(behind.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(behind.message(), AllOf(HasSubstr("key 0"), HasSubstr("push number 0"),
                                      HasSubstr("has taken 2")));
  workers_[1]->Numbered(0, {5}, 2, /*push_pull=*/false);  // computed again: taken already
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  EXPECT_EQ(workers_[1]->ValueOf(workers_[1]->Numbered(0, {200}, 3, /*push_pull=*/true)),
            std::vector<float>({300}));
  EXPECT_EQ(workers_[0]->ValueOf(round3), std::vector<float>({300}));

  // A barrier counts; the next replacement skips it.
  const uint64_t b0 = workers_[0]->Barrier(), b1 = workers_[1]->Barrier();
  EXPECT_EQ(workers_[0]->Next().id(), b0);
  EXPECT_EQ(workers_[1]->Next().id(), b1);
  workers_[1]->Close();
  workers_[1] = std::make_unique<StoreWorker>(*store_, 1, 2, SYNC_MODE_SYNC, 0, rejoin);
  EXPECT_EQ(workers_[1]->hello().progress().barriers(), 1u);
  EXPECT_EQ(workers_[1]->hello().progress().pushes().at(0), 3u);
  EXPECT_EQ(workers_[1]->ValueOf(workers_[1]->Pull(0, /*after_push=*/3)), std::vector<float>({300}));

  // A worker that leaves on purpose (its job ended or was cancelled) is not awaited: what
  // waits on it fails at once, naming it.
  const uint64_t round4 = workers_[0]->Numbered(0, {1}, 4, /*push_pull=*/true);
  workers_[1]->Leave();
  const ServerMessage failed = workers_[0]->Next();
  EXPECT_EQ(failed.id(), round4);
  EXPECT_EQ(failed.code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_THAT(failed.message(), HasSubstr("worker 1 left server 0 (it left the job)"));
}

// A worker's state after its batches (auxiliary states): the store keeps each rank's newest
// two, so a replacement that resumes after batch n finds it whether or not its predecessor
// stashed batch n + 1 too; a replacement's own stash of a batch replaces its predecessor's.
// A job that does not replace workers keeps none.
TEST_F(ServerStoreTest, AWorkersStashedStateIsKeptForItsReplacement) {
  const auto replace = [](Hello& hello) { hello.set_replace_workers(true); };
  Start(2, SYNC_MODE_SYNC, /*max_chunk_bytes=*/8, absl::Seconds(120), nullptr, replace);
  auto stash = [&](int w, uint64_t batch, const std::vector<float>& state) {
    workers_[w]->SendAs(&WorkerMessage::mutable_stash, 0, state, /*chunk=*/2, batch);
    return workers_[w]->Next();
  };
  auto unstash = [&](int w, uint64_t batch) {
    WorkerMessage m;
    m.set_id(1000 + batch);
    m.mutable_unstash()->set_batch(batch);
    workers_[w]->Handle(m);
    return m.id();
  };
  for (uint64_t batch = 1; batch <= 3; ++batch) {
    ASSERT_EQ(stash(1, batch, {1.f * batch, 2, 3, 4, 5}).code(), 0);
  }
  ASSERT_EQ(stash(0, 1, {7}).code(), 0);
  workers_[1]->Close();
  const auto rejoin = [](Hello& hello) {
    hello.set_replace_workers(true);
    hello.set_rejoin(true);
  };
  workers_[1] = std::make_unique<StoreWorker>(*store_, 1, 2, SYNC_MODE_SYNC, 0, rejoin);
  // Batches 2 and 3 are kept (in chunks of two floats), batch 1 is not; rank 0's are its own.
  EXPECT_EQ(workers_[1]->ValueOf(unstash(1, 2)), std::vector<float>({2, 2, 3, 4, 5}));
  EXPECT_EQ(workers_[1]->ValueOf(unstash(1, 3)), std::vector<float>({3, 2, 3, 4, 5}));
  unstash(1, 1);
  const ServerMessage gone = workers_[1]->Next();
  EXPECT_EQ(gone.code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(gone.message(), AllOf(HasSubstr("worker 1's state after batch 1"),
                                    HasSubstr("holds its batches 2, 3")));
  EXPECT_EQ(workers_[0]->ValueOf(unstash(0, 1)), std::vector<float>({7}));
  // The replacement resumes after batch 2: its batch 3 replaces the predecessor's.
  ASSERT_EQ(stash(1, 3, {30}).code(), 0);
  EXPECT_EQ(workers_[1]->ValueOf(unstash(1, 3)), std::vector<float>({30}));
  EXPECT_EQ(workers_[1]->ValueOf(unstash(1, 2)), std::vector<float>({2, 2, 3, 4, 5}));
}

// MXNet's 2-bit compression: a worker's compressed push counts as the values it stands for
// (+threshold, -threshold, 0) in the round's sum; a worker of the job that says otherwise
// in its Hello is refused naming its rank, and so is a compressed push in a job that does
// not compress.
TEST_F(ServerStoreTest, CompressedPushesAreSummedAsTheirValues) {
  const auto two_bit = [](Hello& hello) {
    hello.mutable_compression()->set_type("2bit");
    hello.mutable_compression()->set_threshold(0.5f);
  };
  Start(2, SYNC_MODE_SYNC, 1 << 20, absl::Seconds(120), nullptr, two_bit);
  InitEverywhere(3, std::vector<float>(17, 1.0f));
  auto compressed_push = [&](int w, const std::vector<float>& grad) {
    std::vector<float> residual(grad.size(), 0);
    std::string packed(internal::TwoBitBytes(static_cast<int64_t>(grad.size())), '\0');
    internal::QuantizeTwoBit(grad.data(), residual.data(), static_cast<int64_t>(grad.size()), 0.5f,
                             packed.data());
    WorkerMessage m;
    m.set_id(500 + w);
    ArrayChunk* c = m.mutable_push();
    c->set_key(3);
    c->set_dtype(DT_FLOAT32);
    c->add_shape(static_cast<int64_t>(grad.size()));
    c->set_compressed(true);
    c->set_data(packed);
    c->set_last(true);
    workers_[w]->Handle(m);
    return workers_[w]->Next();
  };
  std::vector<float> g0(17, 0.7f), g1(17, -0.1f);
  g1[16] = -0.9f;
  ASSERT_EQ(compressed_push(0, g0).code(), 0);
  ASSERT_EQ(compressed_push(1, g1).code(), 0);
  std::vector<float> want(17, 1.5f);  // 1 + 0.5 + 0: no optimizer, the sum becomes the value
  want[16] = 1.0f;                    // 1 + 0.5 - 0.5
  for (float& v : want) v -= 1.0f;
  EXPECT_EQ(workers_[0]->PullValue(3), want);

  // Worker 1 comes back without compression (or with another threshold): refused.
  workers_[1]->Close();
  std::vector<ServerMessage> replies;
  std::mutex mu;
  auto session = store_->Open([&](std::vector<ServerMessage> r) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& m : r) replies.push_back(std::move(m));
  });
  WorkerMessage hello;
  hello.set_id(900);
  hello.mutable_hello()->set_protocol_version(kKVStoreProtocolVersion);
  hello.mutable_hello()->set_rank(1);
  hello.mutable_hello()->set_num_workers(2);
  hello.mutable_hello()->set_mode(SYNC_MODE_SYNC);
  session->Handle(hello);
  hello.mutable_hello()->mutable_compression()->set_type("2bit");
  hello.mutable_hello()->mutable_compression()->set_threshold(0.25f);
  session->Handle(hello);
  hello.mutable_hello()->mutable_compression()->set_type("1bit");
  session->Handle(hello);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0].code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(replies[0].message(),
              AllOf(HasSubstr("worker 1 pushes uncompressed"), HasSubstr("2bit (threshold 0.5)")));
  EXPECT_THAT(replies[1].message(), HasSubstr("worker 1 pushes 2bit (threshold 0.25)"));
  EXPECT_EQ(replies[2].code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(replies[2].message(),
              HasSubstr("worker 1's compression: '1bit' is not a compression (known: 2bit, fp16)"));
}

// With pull_type bf16 every pull is answered in bfloat16 - half the bytes, whole values in
// every chunk, the same rounded values in shared memory - rounded afresh each time from the
// server's float32 values: SGD steps of 1e-3 on 1.0, each below bfloat16's resolution there,
// add up on the server and show in the pulls once they reach it.
TEST_F(ServerStoreTest, PullsInBFloat16AreRoundedAfreshFromTheServersFloat32Values) {
  Start(
      2, SYNC_MODE_SYNC, /*max_chunk_bytes=*/12, absl::Seconds(120),
      [](ServerStoreOptions& o) {
        o.shared_memory = true;
        o.shared_memory_min_bytes = 16;
      },
      [](Hello& hello) { hello.mutable_compression()->set_pull_type("bf16"); });
  std::vector<float> v(17);
  for (int i = 0; i < 17; ++i) v[i] = 1.0f + static_cast<float>(i) / 3.0f;
  InitEverywhere(3, v);
  workers_[1]->Pull(3);
  std::string packed;
  for (size_t want : {12u, 12u, 10u}) {  // 34 bytes for 17 values
    const ServerMessage r = workers_[1]->Next();
    ASSERT_EQ(r.code(), 0) << r.message();
    EXPECT_EQ(r.pull().dtype(), DT_BFLOAT16);
    EXPECT_EQ(r.pull().offset(), packed.size());
    EXPECT_EQ(r.pull().data().size(), want);
    EXPECT_EQ(r.pull().last(), want == 10u);
    packed += r.pull().data();
  }
  std::vector<float> pulled(17);
  internal::UnpackPull(packed.data(), 17, pulled.data());
  for (int i = 0; i < 17; ++i) EXPECT_EQ(pulled[i], static_cast<float>(BFloat16(v[i]))) << i;
  EXPECT_NE(pulled[1], v[1]);  // 4/3 is no bfloat16

  InitEverywhere(0, {1, 1, 1, 1});  // 16 bytes: worker 0 pulls it through its slot
  ASSERT_THAT(workers_[0]->Map(0), IsOk());
  CommandRequest sgd;
  sgd.mutable_set_optimizer()->set_name("sgd");
  (*sgd.mutable_set_optimizer()->mutable_params())["learning_rate"] = "1";
  ASSERT_THAT(store_->Command(sgd), IsOk());
  float exact = 1;
  for (int round = 1; round <= 3; ++round) {
    const uint64_t a = workers_[0]->SharedPush(0, std::vector<float>(4, 5e-4f), /*push_pull=*/true);
    const std::vector<float> on_stream = workers_[1]->ValueOf(workers_[1]->PushPull(0, std::vector<float>(4, 5e-4f)));
    const std::vector<float> in_slot = workers_[0]->ValueOf(a);
    exact -= 5e-4f + 5e-4f;
    SCOPED_TRACE(round);
    EXPECT_EQ(on_stream, std::vector<float>(4, static_cast<float>(BFloat16(exact))));
    EXPECT_EQ(in_slot, on_stream);
  }
  // 0.997 rounded; a server that kept its values in bfloat16 would still hold 1.0.
  EXPECT_EQ(workers_[1]->PullValue(0)[0], 0.99609375f);
}

// A compressed push in a job whose workers do not compress is refused naming the key.
TEST_F(ServerStoreTest, ACompressedPushInAnUncompressedJobIsRefused) {
  Start(1, SYNC_MODE_SYNC);
  InitEverywhere(2, {1, 2});
  WorkerMessage m;
  m.set_id(7);
  ArrayChunk* c = m.mutable_push();
  c->set_key(2);
  c->set_dtype(DT_FLOAT32);
  c->add_shape(2);
  c->set_compressed(true);
  c->set_data(std::string(4, '\0'));
  c->set_last(true);
  workers_[0]->Handle(m);
  const ServerMessage r = workers_[0]->Next();
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r.message(), HasSubstr("push of key 2 is compressed, but the workers of job '' do not compress"));
  EXPECT_EQ(workers_[0]->PullValue(2), std::vector<float>({1, 2}));
}

TEST_F(ServerStoreTest, AJobThatDoesNotReplaceWorkersKeepsNoStashedState) {
  Start(1, SYNC_MODE_SYNC);
  workers_[0]->SendAs(&WorkerMessage::mutable_stash, 0, {1, 2}, 1 << 20, 1);
  const ServerMessage refused = workers_[0]->Next();
  EXPECT_EQ(refused.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(refused.message(), HasSubstr("does not replace lost workers"));
}

TEST_F(ServerStoreTest, RoundsAndBarriersWaitingOnSilentRanksFailAfterTheTimeout) {
  // The store reads the test's clock, and the test checks the deadlines: no sleeps.
  auto now_ms = std::make_shared<std::atomic<int64_t>>(0);
  Start(3, SYNC_MODE_SYNC, 1 << 20, absl::Milliseconds(300), [now_ms](ServerStoreOptions& o) {
    o.clock = [now_ms] { return absl::UnixEpoch() + absl::Milliseconds(now_ms->load()); };
    o.watch_deadlines = false;
  });
  InitEverywhere(0, {0});
  // Worker 0 pushes and pulls; worker 1 waits in the barrier (it counts as having pushed);
  // worker 2 is connected but silent. The round and the barrier open at 0 ms.
  workers_[0]->Send(false, 0, {1});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  const uint64_t pull = workers_[0]->Pull(0);
  const uint64_t barrier = workers_[1]->Barrier();
  now_ms->store(299);
  store_->CheckDeadlines();
  EXPECT_FALSE(workers_[0]->HasReply());
  EXPECT_FALSE(workers_[1]->HasReply());
  now_ms->store(300);
  store_->CheckDeadlines();
  ServerMessage r = workers_[0]->Next();
  EXPECT_EQ(r.id(), pull);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(r.message(),
              HasSubstr("dist_sync round 1 of key 0 cannot complete: worker 2 sent nothing "
                        "within 300ms (--round_timeout)"));
  r = workers_[1]->Next();
  EXPECT_EQ(r.id(), barrier);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(r.message(), HasSubstr("barrier cannot complete: workers 0, 2 sent nothing"));
  // The server still serves: once worker 2 pushes, the round completes.
  workers_[1]->Send(false, 0, {10});
  EXPECT_EQ(workers_[1]->Next().code(), 0);
  workers_[2]->Send(false, 0, {100});
  EXPECT_EQ(workers_[2]->Next().code(), 0);
  workers_[2]->Pull(0);
  r = workers_[2]->Next();
  EXPECT_EQ(r.code(), 0) << r.message();
  ASSERT_EQ(r.pull().data().size(), sizeof(float));
  float value = 0;
  std::memcpy(&value, r.pull().data().data(), sizeof(value));
  EXPECT_EQ(value, 111);
}

// Randomized against the round oracle, in threads: every worker pushes every key once per
// round in its own random order, sometimes in several chunks, then pulls them; the value after
// round r must be the sum of every worker's r-th push of the key. The store's own metrics
// count every round and update once.
TEST_F(ServerStoreTest, ConcurrentWorkersMatchTheRoundOracle) {
  constexpr int kWorkers = 4, kKeys = 5, kRounds = 20;
  prometheus::Registry registry;
  ServerMetrics metrics = NewServerMetrics(registry);
  // Keys 2-4 are shared too: each request of them goes through the slot or the stream at
  // random.
  Start(kWorkers, SYNC_MODE_SYNC, /*max_chunk_bytes=*/16, absl::Seconds(120),
        [&](ServerStoreOptions& o) {
          o.shared_memory = true;
          o.shared_memory_min_bytes = 3 * sizeof(float);
          o.metrics = &metrics;
        });
  auto value = [](int w, int key, int round) { return static_cast<float>(1000 * w + 10 * key + round); };
  for (int k = 0; k < kKeys; ++k) InitEverywhere(k, std::vector<float>(k + 1, 0.f));
  for (auto& worker : workers_) {
    for (int k = 2; k < kKeys; ++k) ASSERT_THAT(worker->Map(k), IsOk());
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(kWorkers, 0);
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w + 7);
      for (int round = 1; round <= kRounds; ++round) {
        std::vector<int> keys = {0, 1, 2, 3, 4};
        std::shuffle(keys.begin(), keys.end(), rng);
        auto expect = [&](int k) {
          float sum = 0;
          for (int o = 0; o < kWorkers; ++o) sum += value(o, k, round);
          return sum;
        };
        // Push everything first (some keys as push-pulls, answered with the value): a worker
        // blocking on a pull before pushing the rest would hold back the others' rounds (the
        // engine's asynchronous pulls avoid that).
        std::map<uint64_t, std::pair<int, bool>> sent;  // request id -> key, push-pull
        std::vector<int> pull_later;
        for (int k : keys) {
          const std::vector<float> grad(k + 1, value(w, k, round));
          const bool push_pull = rng() % 2;
          const bool shared = k >= 2 && rng() % 2;
          const uint64_t id = shared      ? workers_[w]->SharedPush(k, grad, push_pull)
                              : push_pull ? workers_[w]->PushPull(k, grad, 1 + rng() % 3)
                                          : workers_[w]->Send(false, k, grad, 1 + rng() % 3);
          sent[id] = {k, push_pull};
          if (!push_pull) pull_later.push_back(k);
        }
        std::set<uint64_t> ids;
        for (const auto& [id, what] : sent) ids.insert(id);
        for (const auto& [id, answer] : workers_[w]->Collect(ids)) {
          const auto [k, push_pull] = sent[id];
          if (answer.code != 0) ++mismatches[w];
          if (answer.value.size() != (push_pull ? k + 1 : 0)) ++mismatches[w];
          for (float v : answer.value) mismatches[w] += v != expect(k);
        }
        std::shuffle(pull_later.begin(), pull_later.end(), rng);
        for (int k : pull_later) {
          const bool shared = k >= 2 && rng() % 2;
          const std::vector<float> pulled =
              shared ? workers_[w]->ValueOf(workers_[w]->SharedPull(k)) : workers_[w]->PullValue(k);
          mismatches[w] += pulled.size() != static_cast<size_t>(k + 1);
          for (float v : pulled) mismatches[w] += v != expect(k);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(mismatches[w], 0) << "worker " << w;
  EXPECT_EQ(metrics.rounds.Value(), kKeys * kRounds);
  EXPECT_EQ(metrics.updates.Value(), kKeys * kRounds);
  prometheus::ClientMetric round_seconds = metrics.round_seconds.Collect();
  EXPECT_EQ(round_seconds.histogram.sample_count, kKeys * kRounds);
}

// A pull answered at once sends its reply under its key's lock; while that send is held, as
// a long optimizer update of the key would be, another worker's pushes and pulls of other
// keys go on (with one store-wide lock they would wait for it).
TEST_F(ServerStoreTest, WorkUnderOneKeysLockHoldsUpNoOtherKey) {
  Start(2, SYNC_MODE_SYNC);
  InitEverywhere(0, {1});
  InitEverywhere(1, {2});
  workers_[0]->HoldReplyTo(workers_[0]->next_id());
  std::thread held([&] { workers_[0]->Pull(0); });
  workers_[0]->WaitUntilHeld();
  std::thread other([&] {
    workers_[1]->Pull(1);
    workers_[1]->Send(false, 1, {5});
    workers_[1]->Pull(1);  // waits for round 1, which needs worker 0's push
  });
  const bool answered = workers_[1]->AwaitReplies(2, absl::Seconds(5));
  workers_[0]->Release();
  held.join();
  other.join();
  EXPECT_TRUE(answered) << "key 1's pull and push waited for key 0";
  const ServerMessage before_round = workers_[1]->Next();
  EXPECT_EQ(before_round.code(), 0) << before_round.message();
  EXPECT_EQ(workers_[1]->Next().code(), 0);  // the push
  EXPECT_EQ(workers_[0]->Next().code(), 0);  // the held pull of key 0
  EXPECT_FALSE(workers_[1]->HasReply());
  workers_[0]->Send(false, 1, {7});
  EXPECT_EQ(workers_[0]->Next().code(), 0);
  const ServerMessage after_round = workers_[1]->Next();
  ASSERT_EQ(after_round.code(), 0) << after_round.message();
  float value = 0;
  std::memcpy(&value, after_round.pull().data().data(), sizeof(value));
  EXPECT_EQ(value, 12);
}

// Keys updated by the server's optimizer (SGD, rate 1: each update subtracts the gradient, exactly
// in float for these integers) from workers in threads, every key's updates racing the
// others'; after a final barrier every key holds its start minus the sum of everything pushed
// into it, in either mode. dist_sync: every worker pushes every key once per round in its own
// order and pulls them, and each pull must see its round exactly. dist_async: random keys,
// pulls in between.
class ServerStoreOptimizerTest : public ServerStoreTest,
                                 public ::testing::WithParamInterface<SyncMode> {};

TEST_P(ServerStoreOptimizerTest, ConcurrentUpdatesOfManyKeysMatchTheSequentialOracle) {
  constexpr int kWorkers = 3, kKeys = 8, kRounds = 15;
  const bool sync = GetParam() == SYNC_MODE_SYNC;
  Start(kWorkers, GetParam(), /*max_chunk_bytes=*/64);
  CommandRequest set;
  set.mutable_set_optimizer()->set_name("sgd");
  (*set.mutable_set_optimizer()->mutable_params())["learning_rate"] = "1";
  ASSERT_THAT(store_->Command(set), IsOk());
  auto size = [](int key) { return 1 + 7 * key; };
  auto grad = [](int w, int key, int round) { return static_cast<float>(w + 3 * key + round); };
  for (int k = 0; k < kKeys; ++k) InitEverywhere(k, std::vector<float>(size(k), 10000.f));
  std::vector<int> mismatches(kWorkers, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w + 11);
      std::vector<int> keys(kKeys);
      std::iota(keys.begin(), keys.end(), 0);
      for (int round = 1; round <= kRounds; ++round) {
        std::shuffle(keys.begin(), keys.end(), rng);
        for (int k : keys) {
          workers_[w]->Send(false, k, std::vector<float>(size(k), grad(w, k, round)),
                            1 + rng() % 9);
          if (workers_[w]->Next().code() != 0) ++mismatches[w];
          if (!sync && rng() % 4 == 0) {
            if (workers_[w]->PullValue(keys[rng() % kKeys]).empty()) ++mismatches[w];
          }
        }
        if (!sync) continue;
        std::shuffle(keys.begin(), keys.end(), rng);
        for (int k : keys) {
          float expect = 10000.f;
          for (int r = 1; r <= round; ++r) {
            for (int o = 0; o < kWorkers; ++o) expect -= grad(o, k, r);
          }
          for (float v : workers_[w]->PullValue(k)) mismatches[w] += v != expect;
        }
      }
      if (workers_[w]->Barrier() == 0 || workers_[w]->Next().code() != 0) ++mismatches[w];
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(mismatches[w], 0) << "worker " << w;
  for (int k = 0; k < kKeys; ++k) {
    float expect = 10000.f;
    for (int r = 1; r <= kRounds; ++r) {
      for (int w = 0; w < kWorkers; ++w) expect -= grad(w, k, r);
    }
    EXPECT_EQ(workers_[0]->PullValue(k), std::vector<float>(size(k), expect)) << "key " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ServerStoreOptimizerTest,
                         ::testing::Values(SYNC_MODE_SYNC, SYNC_MODE_ASYNC),
                         [](const ::testing::TestParamInfo<SyncMode>& info) {
                           return std::string(info.param == SYNC_MODE_SYNC ? "DistSync"
                                                                           : "DistAsync");
                         });

}  // namespace
}  // namespace tessera::kvstore

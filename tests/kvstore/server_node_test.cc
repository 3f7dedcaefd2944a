// ServerNode: a backup takes its primary's keys over only once a majority of the job's
// workers asked in one view, serves them from then on in that view, and routes commands by
// the index they name; a Hello for keys it holds no copy of is refused naming them.
#include "kvstore/server_node.h"

#include <memory>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/internal/replica_store.h"
#include "tests/kvstore/store_worker.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kWorkers = 3;

Hello AskFor(int rank, int index, uint64_t view, const std::string& job = "job") {
  Hello hello;
  hello.set_protocol_version(kKVStoreProtocolVersion);
  hello.set_rank(rank);
  hello.set_num_workers(kWorkers);
  hello.set_mode(SYNC_MODE_SYNC);
  hello.set_job_id(job);
  hello.set_view(view);
  hello.set_serve_index(index);
  return hello;
}

class ServerNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
    ServerStoreOptions options;
    options.server_index = 1;  // backs up server 0
    options.num_servers = 3;
    options.num_workers = kWorkers;
    options.watch_deadlines = false;
    node_ = std::make_unique<ServerNode>(owned_->get(), options);
    // Server 0's Init of key 4, as its Replicate stream brings it.
    ReplicaMessage init;
    init.set_id(1);
    init.set_job_id("job");
    init.set_primary(0);
    init.set_mode(SYNC_MODE_SYNC);
    init.set_num_workers(kWorkers);
    const std::vector<float> value = {1, 2};
    init.mutable_value()->set_key(4);
    init.mutable_value()->set_dtype(DT_FLOAT32);
    init.mutable_value()->add_shape(2);
    init.mutable_value()->set_data(value.data(), value.size() * sizeof(float));
    init.mutable_value()->set_last(true);
    for (int r = 0; r < kWorkers; ++r) init.add_taken(0);
    replica_ = node_->own().OpenReplicaSession();
    std::optional<ReplicaAck> ack = replica_->Handle(init);
    ASSERT_TRUE(ack.has_value());
    ASSERT_EQ(ack->code(), 0) << ack->message();
  }

  std::unique_ptr<OwnedRuntime> owned_;
  std::unique_ptr<ServerNode> node_;
  std::unique_ptr<ServerStore::ReplicaSession> replica_;
};

TEST_F(ServerNodeTest, AMajorityOfTheWorkersMovesTheKeysToTheBackup) {
  EXPECT_THAT(node_->StoreFor(AskFor(0, 0, 1)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("majority of the 3 workers ask: 1 did")));
  // The same worker asking again is still one.
  EXPECT_THAT(node_->StoreFor(AskFor(0, 0, 1)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("1 did")));
  EXPECT_EQ(node_->taken_over(), nullptr);
  absl::StatusOr<std::shared_ptr<ServerStore>> taker = node_->StoreFor(AskFor(2, 0, 1));
  ASSERT_THAT(taker.status(), IsOk());
  EXPECT_EQ((*taker)->options().server_index, 0);
  EXPECT_EQ((*taker)->options().view, 1u);
  EXPECT_EQ(node_->taken_over(), taker->get());
  // The third worker finds it; a Hello of another view does not.
  EXPECT_EQ(node_->StoreFor(AskFor(1, 0, 1))->get(), taker->get());
  EXPECT_THAT(node_->StoreFor(AskFor(1, 0, 2)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("took them over in view 1")));
  // Its own index stays its own.
  EXPECT_EQ(node_->StoreFor(AskFor(1, 1, 0))->get(), &node_->own());
  // Commands go by the index they name.
  CommandRequest command;
  command.set_job_id("job");
  EXPECT_EQ(node_->StoreFor(command)->get(), &node_->own());
  command.set_serve_index(0);
  EXPECT_EQ(node_->StoreFor(command)->get(), taker->get());
  command.set_job_id("another");
  EXPECT_THAT(node_->StoreFor(command).status(), StatusIs(absl::StatusCode::kNotFound));
  // The old primary's updates are refused from now on: it is fenced.
  ReplicaMessage late;
  late.set_id(2);
  late.set_job_id("job");
  late.set_primary(0);
  late.set_mode(SYNC_MODE_SYNC);
  late.set_num_workers(kWorkers);
  late.set_version(1);
  const std::vector<float> grad = {1, 1};
  late.mutable_value()->set_key(4);
  late.mutable_value()->set_dtype(DT_FLOAT32);
  late.mutable_value()->add_shape(2);
  late.mutable_value()->set_data(grad.data(), grad.size() * sizeof(float));
  late.mutable_value()->set_last(true);
  for (int r = 0; r < kWorkers; ++r) late.add_taken(1);
  std::optional<ReplicaAck> ack = replica_->Handle(late);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->code(), static_cast<int>(absl::StatusCode::kAborted)) << ack->message();
}

// A store that took an index over serves its job only: when another job comes and none of
// the old job's workers is connected to it, the node lets go of it, and it is freed once the
// last session holding it ends.
TEST_F(ServerNodeTest, ATakenOverStoreOfAFinishedJobGoesWhenTheNextJobComes) {
  ASSERT_THAT(node_->StoreFor(AskFor(0, 0, 1)).status(), StatusIs(absl::StatusCode::kUnavailable));
  absl::StatusOr<std::shared_ptr<ServerStore>> taker = node_->StoreFor(AskFor(1, 0, 1));
  ASSERT_THAT(taker.status(), IsOk());
  const std::weak_ptr<ServerStore> held = *taker;
  auto worker = std::make_unique<StoreWorker>(**taker, 1, kWorkers, SYNC_MODE_SYNC, /*view=*/1,
                                              [](Hello& hello) {
                                                hello.set_job_id("job");
                                                hello.set_serve_index(0);
                                              });
  ASSERT_EQ(worker->hello().view(), 1u);
  taker->reset();

  // A worker of the job is still connected: the store stays, whatever other job says Hello.
  Hello next = AskFor(0, 1, 0, "next");
  next.clear_serve_index();
  ASSERT_THAT(node_->StoreFor(next).status(), IsOk());
  EXPECT_NE(node_->taken_over(0), nullptr);
  EXPECT_FALSE(held.expired());
  // Its job's own Hellos find it whatever happened.
  EXPECT_EQ(node_->StoreFor(AskFor(2, 0, 1))->get(), held.lock().get());

  // The last worker gone, the next job's Hello lets go of it; its session held it until then.
  worker.reset();
  EXPECT_FALSE(held.expired()) << "let go before another job came";
  ASSERT_THAT(node_->StoreFor(next).status(), IsOk());
  EXPECT_EQ(node_->taken_over(0), nullptr);
  EXPECT_EQ(node_->taken_over(), nullptr);
  EXPECT_TRUE(held.expired());
  CommandRequest command;
  command.set_job_id("job");
  command.set_serve_index(0);
  EXPECT_THAT(node_->StoreFor(command).status(), StatusIs(absl::StatusCode::kNotFound));
}

// A lost worker's replacement looks for where an index is served now: its Hello is routed to
// the store serving it (any view) and never counts as a vote for a takeover.
TEST_F(ServerNodeTest, AReplacementsHelloFindsTheServingStoreAndNeverVotes) {
  Hello rejoin = AskFor(0, 0, 0);
  rejoin.set_rejoin(true);
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_THAT(node_->StoreFor(rejoin).status(),
                StatusIs(absl::StatusCode::kNotFound,
                         HasSubstr("server 1 does not serve server 0's keys for job 'job'")));
  }
  EXPECT_EQ(node_->taken_over(), nullptr);
  ASSERT_THAT(node_->StoreFor(AskFor(0, 0, 1)).status(), StatusIs(absl::StatusCode::kUnavailable));
  absl::StatusOr<std::shared_ptr<ServerStore>> taker = node_->StoreFor(AskFor(1, 0, 1));
  ASSERT_THAT(taker.status(), IsOk());
  absl::StatusOr<std::shared_ptr<ServerStore>> found = node_->StoreFor(rejoin);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_EQ(found->get(), taker->get());
  Hello own = AskFor(2, 1, 0);
  own.set_rejoin(true);
  found = node_->StoreFor(own);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_EQ(found->get(), &node_->own());
}

TEST_F(ServerNodeTest, KeysWithoutACopyHereAreRefusedNamingThem) {
  // Server 2's keys are on server 0 (server 1 backs up server 0 only).
  EXPECT_THAT(node_->StoreFor(AskFor(0, 2, 1)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("holds no copy of server 2's keys")));
  // Another job's majority finds no copy of that job.
  ASSERT_THAT(node_->StoreFor(AskFor(0, 0, 1, "other")).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(node_->StoreFor(AskFor(1, 0, 1, "other")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no copy of job 'other'")));
  EXPECT_EQ(node_->taken_over(), nullptr);
  EXPECT_THAT(node_->StoreFor(AskFor(7, 0, 1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 7")));
}

}  // namespace
}  // namespace tessera::kvstore

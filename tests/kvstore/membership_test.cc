// Membership on its own: Hello refusals naming what is wrong, job after job, departures and
// rejoins, and the barrier (filling, refusals, its deadline on a clock the test sets).
#include "kvstore/internal/membership.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

Hello HelloOf(int rank, int num_workers = 3, SyncMode mode = SYNC_MODE_SYNC,
              const std::string& job = "job-a") {
  Hello hello;
  hello.set_rank(rank);
  hello.set_num_workers(num_workers);
  hello.set_mode(mode);
  hello.set_job_id(job);
  return hello;
}

TEST(MembershipTest, AHelloThatDoesNotFitIsRefusedNamingWhy) {
  Membership members(/*server_index=*/1, /*num_workers=*/3);
  bool started = false;
  EXPECT_THAT(members.Admit(HelloOf(0, 4), &started),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("worker 0 counts 4 workers but server 1 serves 3")));
  EXPECT_THAT(members.Admit(HelloOf(3), &started),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 3 is outside [0, 3)")));
  EXPECT_THAT(members.Admit(HelloOf(0, 3, SYNC_MODE_UNSET), &started),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no mode")));
  EXPECT_EQ(members.connected_count(), 0);

  ASSERT_THAT(members.Admit(HelloOf(0), &started), IsOk());
  EXPECT_TRUE(started);
  EXPECT_EQ(members.job_id(), "job-a");
  EXPECT_EQ(members.mode(), SYNC_MODE_SYNC);
  EXPECT_THAT(members.Admit(HelloOf(0), &started),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("worker 0 is already connected to server 1")));
  EXPECT_THAT(members.Admit(HelloOf(1, 3, SYNC_MODE_ASYNC), &started),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("worker 1 asks for dist_async but this job runs dist_sync")));
  EXPECT_THAT(members.Admit(HelloOf(1, 3, SYNC_MODE_SYNC, "job-b"), &started),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("serves job 'job-a' (1 of its workers connected)"),
                             HasSubstr("job 'job-b' must wait"))));
  ASSERT_THAT(members.Admit(HelloOf(1), &started), IsOk());
  EXPECT_FALSE(started);
  EXPECT_EQ(members.connected_count(), 2);
}

TEST(MembershipTest, ANewJobStartsAfreshOnceTheLastOnesWorkersLeft) {
  Membership members(0, 2);
  bool started = false;
  ASSERT_THAT(members.Admit(HelloOf(0, 2), &started), IsOk());
  ASSERT_THAT(members.Admit(HelloOf(1, 2), &started), IsOk());
  EXPECT_THAT(members.Depart(0, "stream closed"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("worker 0 left server 0 (stream closed)")));
  EXPECT_THAT(members.Admit(HelloOf(0, 2, SYNC_MODE_ASYNC, "job-b"), &started),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("must wait")));
  (void)members.Depart(1, "stream closed");
  // Nothing of job-a carries over: not its departures, not its mode.
  ASSERT_THAT(members.Admit(HelloOf(0, 2, SYNC_MODE_ASYNC, "job-b"), &started), IsOk());
  EXPECT_TRUE(started);
  EXPECT_EQ(members.job_id(), "job-b");
  EXPECT_EQ(members.mode(), SYNC_MODE_ASYNC);
  for (const absl::Status& why : members.departed()) EXPECT_THAT(why, IsOk());
}

TEST(MembershipTest, TheBarrierOpensWhenEveryRankWaitsAndNotWhileOneIsGone) {
  Membership members(0, 3);
  bool started = false;
  for (int r = 0; r < 3; ++r) ASSERT_THAT(members.Admit(HelloOf(r), &started), IsOk());
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_THAT(members.EnterBarrier(2, 7, t0), IsOk());
  EXPECT_THAT(members.EnterBarrier(2, 8, t0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("worker 2 is already in the barrier")));
  ASSERT_THAT(members.EnterBarrier(0, 5, t0 + absl::Seconds(1)), IsOk());
  EXPECT_THAT(members.InBarrier(), ElementsAre(1, 0, 1));
  EXPECT_FALSE(members.barrier_full());
  // The deadline counts from the first waiter.
  EXPECT_FALSE(members.BarrierOverdue(t0 + absl::Seconds(9), absl::Seconds(10)));
  EXPECT_TRUE(members.BarrierOverdue(t0 + absl::Seconds(10), absl::Seconds(10)));
  ASSERT_THAT(members.EnterBarrier(1, 6, t0 + absl::Seconds(2)), IsOk());
  EXPECT_TRUE(members.barrier_full());
  EXPECT_THAT(members.TakeBarrier(/*opened=*/true), ElementsAre(Pair(0, 5), Pair(1, 6), Pair(2, 7)));
  EXPECT_FALSE(members.barrier_waiting());
  EXPECT_FALSE(members.BarrierOverdue(t0 + absl::Seconds(100), absl::Seconds(10)));

  // A waiter that leaves leaves the barrier; while it is gone the barrier cannot complete,
  // and once it says Hello again it can.
  ASSERT_THAT(members.EnterBarrier(1, 9, t0), IsOk());
  (void)members.Depart(1, "keepalive timeout");
  EXPECT_FALSE(members.barrier_waiting());
  EXPECT_THAT(members.EnterBarrier(0, 10, t0),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("barrier cannot complete"),
                             HasSubstr("worker 1 left server 0 (keepalive timeout)"))));
  ASSERT_THAT(members.Admit(HelloOf(1), &started), IsOk());
  EXPECT_FALSE(started);
  EXPECT_THAT(members.EnterBarrier(0, 11, t0), IsOk());
  EXPECT_EQ(members.barriers_opened(), 1u);
}

TEST(MembershipTest, AJobThatReplacesWorkersWaitsForTheDepartedRankAndCountsItsBarriers) {
  Membership members(0, 2);
  bool started = false;
  Hello first = HelloOf(0, 2);
  first.set_replace_workers(true);
  ASSERT_THAT(members.Admit(first, &started), IsOk());
  ASSERT_THAT(members.Admit(HelloOf(1, 2), &started), IsOk());
  EXPECT_TRUE(members.replaces_workers());
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (uint64_t id : {1, 2}) {
    ASSERT_THAT(members.EnterBarrier(static_cast<int>(id) - 1, id, t0), IsOk());
  }
  ASSERT_TRUE(members.barrier_full());
  (void)members.TakeBarrier(/*opened=*/true);
  // Rank 1 dies inside the next barrier: nothing fails, the barrier waits for its
  // replacement (until its deadline), which enters it again.
  ASSERT_THAT(members.EnterBarrier(1, 3, t0), IsOk());
  EXPECT_THAT(members.Depart(1, "stream closed"), IsOk());
  EXPECT_THAT(members.departed(), ElementsAre(IsOk(), IsOk()));
  EXPECT_FALSE(members.connected(1));
  ASSERT_THAT(members.EnterBarrier(0, 4, t0), IsOk());
  EXPECT_FALSE(members.barrier_full());
  EXPECT_TRUE(members.BarrierOverdue(t0 + absl::Seconds(10), absl::Seconds(10)));
  ASSERT_THAT(members.Admit(HelloOf(1, 2), &started), IsOk());
  EXPECT_FALSE(started);
  ASSERT_THAT(members.EnterBarrier(1, 5, t0), IsOk());
  EXPECT_THAT(members.TakeBarrier(/*opened=*/true), ElementsAre(Pair(0, 4), Pair(1, 5)));
  EXPECT_EQ(members.barriers_opened(), 2u);
  // A failed barrier is not counted.
  ASSERT_THAT(members.EnterBarrier(0, 6, t0), IsOk());
  (void)members.TakeBarrier(/*opened=*/false);
  EXPECT_EQ(members.barriers_opened(), 2u);
}

// A store that took a lost server's keys over (Adopt) learns from the workers' Hellos how many
// barriers they passed there; a replacement's Hello (its predecessor's count unknown to it)
// changes nothing.
TEST(MembershipTest, ATakeoverCountsTheBarriersItsWorkersPassedAtTheLostServer) {
  Membership members(0, 2);
  members.Adopt("job-a", SYNC_MODE_SYNC);
  bool started = false;
  Hello survivor = HelloOf(0, 2);
  survivor.set_barriers(5);
  ASSERT_THAT(members.Admit(survivor, &started), IsOk());
  EXPECT_FALSE(started);
  EXPECT_EQ(members.barriers_opened(), 5u);
  Hello rejoin = HelloOf(1, 2);
  rejoin.set_rejoin(true);
  rejoin.set_barriers(9);
  ASSERT_THAT(members.Admit(rejoin, &started), IsOk());
  EXPECT_EQ(members.barriers_opened(), 5u);
}

}  // namespace
}  // namespace tessera::kvstore

// The coordinator's state machine: a bounded FIFO queue run one job at a time, cancel of a
// queued and of a running job, owners that cannot see each other's jobs, attach (history,
// then live, then the record), and records that survive a restart - including a crash, taken
// as a copy of the store's folder while a job runs (what SIGKILL would leave on disk).
//
// The cluster here is one the test drives (TestCluster): each run waits until the test ends
// it or it is cancelled, so that "a job is running" is a state the test holds, not a
// duration. tests/integration/job_test.cc runs the same coordinator over real daemons.
#include "jobs/coordinator.h"

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>

#include "core/file.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::jobs {
namespace {

namespace fs = std::filesystem;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using Eval = std::map<std::string, double>;

// Runs one job at a time until the test ends it (End) or the coordinator cancels it.
class TestCluster {
 public:
  ClusterRunner Runner() {
    return [this](const SubmitJobRequest& request,
                  const std::function<void(int, const JobEvent&)>& on_event,
                  Cancellation* cancellation) -> absl::StatusOr<Eval> {
      // This run's own flag: a cancel that comes as the run returns must not reach the next.
      // Registered outside mu_: it runs at once when the cancel came first.
      auto cancelled = std::make_shared<bool>(false);
      auto registration = cancellation->OnCancel([this, cancelled] {
        std::lock_guard<std::mutex> lock(mu_);
        *cancelled = true;
        cv_.notify_all();
      });
      std::unique_lock<std::mutex> lock(mu_);
      running_ = request.spec().job_id();
      on_event_ = &on_event;
      runs_.push_back(request);
      cv_.notify_all();
      cv_.wait(lock, [&] { return outcome_.has_value() || *cancelled; });
      absl::StatusOr<Eval> outcome =
          outcome_.has_value() ? *outcome_ : absl::StatusOr<Eval>(absl::CancelledError("cancelled"));
      outcome_.reset();
      running_.clear();
      on_event_ = nullptr;
      cv_.notify_all();
      return outcome;
    };
  }
  // Waits until job `id` runs; false after 30 s.
  bool AwaitRunning(const std::string& id) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return running_ == id; });
  }
  // An event of the running job from worker `rank` (the test is its only sender).
  void Emit(int rank, const JobEvent& event) {
    const std::function<void(int, const JobEvent&)>* on_event;
    {
      std::lock_guard<std::mutex> lock(mu_);
      on_event = on_event_;
    }
    ASSERT_NE(on_event, nullptr);
    (*on_event)(rank, event);
  }
  // Ends the running job with `outcome` and waits until the run has returned.
  void End(absl::StatusOr<Eval> outcome) {
    std::unique_lock<std::mutex> lock(mu_);
    outcome_ = std::move(outcome);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !outcome_.has_value(); });
  }
  std::vector<SubmitJobRequest> runs() {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string running_;
  const std::function<void(int, const JobEvent&)>* on_event_ = nullptr;
  std::optional<absl::StatusOr<Eval>> outcome_;
  std::vector<SubmitJobRequest> runs_;
};

// Collects what an attached client would receive.
class Recorder : public JobListener {
 public:
  void OnEvent(const RankedEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(event);
  }
  void OnEnd(const JobRecord& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++ends_;
    end_ = record;
    cv_.notify_all();
  }
  bool AwaitEnd() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return ends_ > 0; });
  }
  std::vector<RankedEvent> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  int ends() {
    std::lock_guard<std::mutex> lock(mu_);
    return ends_;
  }
  JobRecord end() {
    std::lock_guard<std::mutex> lock(mu_);
    return end_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RankedEvent> events_;
  int ends_ = 0;
  JobRecord end_;
};

SubmitJobRequest Request(const std::string& name, int epochs = 3) {
  SubmitJobRequest request;
  request.mutable_spec()->set_name(name);
  request.mutable_spec()->set_num_epochs(epochs);
  request.mutable_spec()->set_batch_size(32);
  request.mutable_spec()->mutable_data()->set_kind("mnist");
  request.mutable_spec()->set_kvstore("dist_sync");
  request.add_workers("unix:/w0.sock");
  request.add_workers("unix:/w1.sock");
  request.add_servers("unix:/ps0.sock");
  return request;
}

JobEvent Started(int64_t batches_per_epoch) {
  JobEvent e;
  e.mutable_started()->set_batches_per_epoch(batches_per_epoch);
  return e;
}
JobEvent Batch(int epoch, int batch) {
  JobEvent e;
  e.mutable_batch()->set_epoch(epoch);
  e.mutable_batch()->set_batch(batch);
  e.mutable_batch()->set_samples_per_second(1000);
  return e;
}
JobEvent Epoch(int epoch, double accuracy) {
  JobEvent e;
  e.mutable_epoch()->set_epoch(epoch);
  (*e.mutable_epoch()->mutable_eval())["accuracy"] = accuracy;
  return e;
}

std::vector<std::string> States(const std::vector<JobRecord>& records) {
  std::vector<std::string> states;
  for (const JobRecord& r : records) {
    states.push_back(absl::StrCat(r.name(), ":", r.state(), ":", r.queue_position()));
  }
  return states;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<Coordinator> Open(CoordinatorOptions options = {}) {
    options.now = [this] { return now_; };
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Open(options, cluster_.Runner());
    EXPECT_THAT(c.status(), IsOk());
    return c.ok() ? *std::move(c) : nullptr;
  }
  JobRecord Submit(Coordinator& c, const std::string& name, const std::string& owner = "alice") {
    absl::StatusOr<JobRecord> r = c.Submit(Request(name), owner);
    EXPECT_THAT(r.status(), IsOk());
    return r.value_or(JobRecord());
  }
  std::string StateDir() {
    const std::string dir = ::testing::TempDir() + "/" +
                            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir);
    return dir;
  }

  TestCluster cluster_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

TEST_F(CoordinatorTest, QueuedJobsRunOneAtATimeInSubmissionOrder) {
  std::unique_ptr<Coordinator> c = Open();
  const JobRecord a = Submit(*c, "a");
  ASSERT_TRUE(cluster_.AwaitRunning(a.id()));
  const JobRecord b = Submit(*c, "b");
  const JobRecord d = Submit(*c, "d/../x");  // a name is no path: the id keeps it in the store
  EXPECT_EQ(b.state(), JobRecord::QUEUED);
  EXPECT_EQ(b.queue_position(), 1);
  EXPECT_EQ(d.queue_position(), 2);
  EXPECT_THAT(d.id(), AllOf(HasSubstr("d-..-x-"), ::testing::Not(HasSubstr("/"))));
  EXPECT_THAT(States(c->List("alice")),
              ElementsAre("a:1:0", "b:0:1", "d/../x:0:2"));  // RUNNING = 1, QUEUED = 0

  cluster_.End(Eval{{"accuracy", 0.9}});
  ASSERT_TRUE(cluster_.AwaitRunning(b.id()));
  absl::StatusOr<JobRecord> done = c->Get(a.id(), "alice");
  ASSERT_THAT(done.status(), IsOk());
  EXPECT_EQ(done->state(), JobRecord::SUCCEEDED);
  EXPECT_EQ(done->eval().at("accuracy"), 0.9);
  EXPECT_EQ(c->Get(d.id(), "alice")->queue_position(), 1);
  cluster_.End(absl::UnavailableError("worker 1 (unix:/w1.sock): gone"));
  ASSERT_TRUE(cluster_.AwaitRunning(d.id()));
  EXPECT_EQ(c->Get(b.id(), "alice")->state(), JobRecord::FAILED);
  EXPECT_THAT(c->Get(b.id(), "alice")->message(), HasSubstr("worker 1"));
  cluster_.End(Eval{});

  // Each run got its id, and at least a batch event every 10 batches.
  ASSERT_EQ(cluster_.runs().size(), 3u);
  EXPECT_EQ(cluster_.runs()[0].spec().job_id(), a.id());
  EXPECT_EQ(cluster_.runs()[0].spec().batch_event_every(), 10);
  EXPECT_EQ(cluster_.runs()[0].workers_size(), 2);
}

TEST_F(CoordinatorTest, TheQueueIsBoundedAndSaysByWhat) {
  std::unique_ptr<Coordinator> c = Open({.max_queued = 2});
  const JobRecord a = Submit(*c, "a");
  ASSERT_TRUE(cluster_.AwaitRunning(a.id()));
  Submit(*c, "b");
  Submit(*c, "c");
  EXPECT_THAT(c->Submit(Request("d"), "alice"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("at most 2")));
  EXPECT_THAT(c->Submit(SubmitJobRequest(), "alice"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no workers")));
  // A job the workers would refuse is refused at once, not after the jobs ahead of it.
  SubmitJobRequest bad = Request("e");
  bad.mutable_spec()->set_kvstore("dist_sinc");
  EXPECT_THAT(c->Submit(bad, "alice"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job field 'kvstore'")));
  EXPECT_EQ(c->List("alice").size(), 3u);
  cluster_.End(Eval{});
}

TEST_F(CoordinatorTest, CancelTakesAQueuedJobOffTheQueueAndStopsARunningOne) {
  std::unique_ptr<Coordinator> c = Open();
  const JobRecord a = Submit(*c, "a");
  ASSERT_TRUE(cluster_.AwaitRunning(a.id()));
  const JobRecord b = Submit(*c, "b");
  const JobRecord d = Submit(*c, "d");

  absl::StatusOr<JobRecord> queued = c->Cancel(b.id(), "alice");
  ASSERT_THAT(queued.status(), IsOk());
  EXPECT_EQ(queued->state(), JobRecord::CANCELLED);
  EXPECT_THAT(queued->message(), HasSubstr("while queued"));
  EXPECT_EQ(c->Get(d.id(), "alice")->queue_position(), 1);

  absl::StatusOr<JobRecord> running = c->Cancel(a.id(), "alice");
  ASSERT_THAT(running.status(), IsOk());
  ASSERT_TRUE(cluster_.AwaitRunning(d.id())) << "the cancelled job's run did not end";
  EXPECT_EQ(c->Get(a.id(), "alice")->state(), JobRecord::CANCELLED);
  // A finished job is returned as it is.
  EXPECT_EQ(c->Cancel(b.id(), "alice")->state(), JobRecord::CANCELLED);
  cluster_.End(Eval{});
  ASSERT_EQ(cluster_.runs().size(), 2u) << "the cancelled queued job never ran";
}

TEST_F(CoordinatorTest, AJobIsItsOwnersOnly) {
  std::unique_ptr<Coordinator> c = Open();
  const JobRecord a = Submit(*c, "a", "alice");
  ASSERT_TRUE(cluster_.AwaitRunning(a.id()));
  EXPECT_EQ(a.owner(), "alice");
  EXPECT_THAT(c->List("mallory"), IsEmpty());
  EXPECT_THAT(c->Get(a.id(), "mallory"), StatusIs(absl::StatusCode::kNotFound, HasSubstr(a.id())));
  EXPECT_THAT(c->Cancel(a.id(), "mallory"), StatusIs(absl::StatusCode::kNotFound, HasSubstr(a.id())));
  Recorder recorder;
  EXPECT_THAT(c->Attach(a.id(), "mallory", &recorder).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(c->Get(a.id(), "alice")->state(), JobRecord::RUNNING) << "mallory's cancel did nothing";
  EXPECT_THAT(c->Get("no-such-job", "alice"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such-job")));
  EXPECT_THAT(c->Get("../../etc", "alice"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a job id")));
  cluster_.End(Eval{});
}

TEST_F(CoordinatorTest, AttachGivesTheHistoryThenLiveEventsThenTheRecordOnce) {
  std::unique_ptr<Coordinator> c = Open();
  const JobRecord a = Submit(*c, "a");
  ASSERT_TRUE(cluster_.AwaitRunning(a.id()));
  cluster_.Emit(0, Started(40));
  cluster_.Emit(1, Started(40));
  cluster_.Emit(0, Batch(0, 10));
  cluster_.Emit(0, Epoch(0, 0.5));
  cluster_.Emit(0, Batch(1, 20));
  absl::StatusOr<JobRecord> record = c->Get(a.id(), "alice");
  EXPECT_EQ(record->epoch(), 1);
  EXPECT_EQ(record->batch(), 20);
  EXPECT_EQ(record->batches_per_epoch(), 40);

  Recorder early;
  auto attached = c->Attach(a.id(), "alice", &early);
  ASSERT_THAT(attached.status(), IsOk());
  ASSERT_EQ(early.events().size(), 4u)
      << "the history: both Started and the epoch, then worker 0's latest batch";
  EXPECT_EQ(early.events()[1].rank(), 1);
  EXPECT_EQ(early.events()[3].event().batch().batch(), 20) << "where the job stands";
  cluster_.Emit(0, Batch(1, 30));
  cluster_.Emit(0, Epoch(1, 0.75));
  {
    Recorder gone;  // detaches before the job ends: nothing reaches it after that
    ASSERT_THAT(c->Attach(a.id(), "alice", &gone).status(), IsOk());
  }
  cluster_.End(Eval{{"accuracy", 0.75}});
  ASSERT_TRUE(early.AwaitEnd());
  EXPECT_EQ(early.events().size(), 6u) << "live: the batch and the epoch";
  EXPECT_EQ(early.ends(), 1);
  EXPECT_EQ(early.end().state(), JobRecord::SUCCEEDED);
  EXPECT_EQ(early.end().epoch(), 2);

  Recorder late;  // a finished job: all of it at once
  ASSERT_THAT(c->Attach(a.id(), "alice", &late).status(), IsOk());
  EXPECT_EQ(late.events().size(), 4u);
  EXPECT_EQ(late.ends(), 1);
}

// A lost worker's replacement (from any rank) is counted in the record and kept among the
// events an attached client is given.
TEST_F(CoordinatorTest, AReplacedWorkerIsCountedAndKeptInTheHistory) {
  std::unique_ptr<Coordinator> c = Open();
  const JobRecord a = Submit(*c, "a");
  ASSERT_TRUE(cluster_.AwaitRunning(a.id()));
  JobEvent replaced;
  replaced.mutable_worker_replaced()->set_rank(1);
  replaced.mutable_worker_replaced()->set_reason("UNAVAILABLE: worker 1: Socket closed");
  replaced.mutable_worker_replaced()->set_replacement(1);
  cluster_.Emit(1, replaced);
  absl::StatusOr<JobRecord> record = c->Get(a.id(), "alice");
  ASSERT_THAT(record.status(), IsOk());
  EXPECT_EQ(record->worker_replacements(), 1);
  Recorder attached;
  auto attachment = c->Attach(a.id(), "alice", &attached);
  ASSERT_THAT(attachment.status(), IsOk());
  ASSERT_EQ(attached.events().size(), 1u);
  EXPECT_EQ(attached.events()[0].rank(), 1);
  EXPECT_TRUE(attached.events()[0].event().has_worker_replaced());
  cluster_.End(Eval{{"accuracy", 1.0}});
  ASSERT_TRUE(attached.AwaitEnd());
  EXPECT_EQ(attached.end().worker_replacements(), 1);
}

TEST_F(CoordinatorTest, RecordsAndQueueSurviveACrashAndARestart) {
  const std::string dir = StateDir();
  const std::string crashed = dir + "-at-crash";
  fs::remove_all(crashed);
  std::string a, b, d;
  {
    std::unique_ptr<Coordinator> c = Open({.state_dir = dir});
    a = Submit(*c, "a").id();
    ASSERT_TRUE(cluster_.AwaitRunning(a));
    cluster_.Emit(0, Epoch(0, 0.5));
    cluster_.End(Eval{{"accuracy", 0.5}});
    b = Submit(*c, "b").id();
    ASSERT_TRUE(cluster_.AwaitRunning(b));
    cluster_.Emit(0, Epoch(0, 0.25));
    d = Submit(*c, "d").id();
    // What SIGKILL would leave now: b running, d queued.
    fs::copy(dir, crashed, fs::copy_options::recursive);
    cluster_.End(Eval{});
  }
  // A crash mid-append leaves a torn event; a crash mid-creation a folder without a record.
  ASSERT_THAT(AppendToFile(crashed + "/" + b + "/events.log", std::string("\x30\x00\x00\x00\x0a", 5)), IsOk());
  fs::create_directories(crashed + "/half-made-1");

  now_ += absl::Hours(1);
  std::unique_ptr<Coordinator> c = Open({.state_dir = crashed});
  ASSERT_TRUE(cluster_.AwaitRunning(b + ".c1"))
      << "the job running at the crash runs again first, as a new run for the servers";
  std::vector<JobRecord> jobs = c->List("alice");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].state(), JobRecord::SUCCEEDED);
  EXPECT_EQ(jobs[0].eval().at("accuracy"), 0.5);
  EXPECT_EQ(jobs[1].state(), JobRecord::RUNNING);
  EXPECT_EQ(jobs[1].restarts(), 1);
  EXPECT_EQ(jobs[1].run_id(), b + ".c1");
  EXPECT_EQ(jobs[1].epoch(), 1) << "its progress at the crash";
  EXPECT_EQ(jobs[2].state(), JobRecord::QUEUED);
  Recorder history;
  ASSERT_THAT(c->Attach(b, "alice", &history).status(), IsOk());
  ASSERT_EQ(history.events().size(), 2u)
      << "the torn event is dropped, the whole one kept, then the restart";
  EXPECT_EQ(history.events()[0].event().epoch().eval().at("accuracy"), 0.25);
  EXPECT_THAT(history.events()[1].event().restarted().reason(), HasSubstr("restarted while the job ran"));
  cluster_.End(Eval{});
  ASSERT_TRUE(cluster_.AwaitRunning(d)) << "then the queued job";
  jobs = c->List("alice");
  EXPECT_EQ(jobs[1].state(), JobRecord::SUCCEEDED);
  // New ids do not collide with the old ones.
  const JobRecord e = Submit(*c, "a");
  EXPECT_NE(e.id(), a);
  EXPECT_GT(e.sequence(), jobs[2].sequence());
  cluster_.End(Eval{});
  ASSERT_TRUE(cluster_.AwaitRunning(e.id()));
  cluster_.End(Eval{});
}

TEST_F(CoordinatorTest, AStoppedCoordinatorRunsItsJobAgainWhenItComesBack) {
  const std::string dir = StateDir();
  std::string a, b;
  {
    std::unique_ptr<Coordinator> c = Open({.state_dir = dir});
    a = Submit(*c, "a").id();
    ASSERT_TRUE(cluster_.AwaitRunning(a));
    b = Submit(*c, "b").id();
    c->Stop();  // SIGTERM, a pod evicted
    EXPECT_THAT(c->Submit(Request("late"), "alice"), StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_EQ(c->Get(a, "alice")->state(), JobRecord::RUNNING);
    EXPECT_THAT(c->Get(a, "alice")->message(), HasSubstr("stopped while the job ran"));
  }
  std::unique_ptr<Coordinator> c = Open({.state_dir = dir});
  ASSERT_TRUE(cluster_.AwaitRunning(a + ".c1")) << "the stopped job first";
  cluster_.End(Eval{{"accuracy", 0.5}});
  ASSERT_TRUE(cluster_.AwaitRunning(b)) << "then the queued one";
  EXPECT_EQ(c->Get(a, "alice")->state(), JobRecord::SUCCEEDED);
  cluster_.End(Eval{});
}

TEST_F(CoordinatorTest, OnlyTheNewestFinishedJobsAreKept) {
  const std::string dir = StateDir();
  std::unique_ptr<Coordinator> c = Open({.state_dir = dir, .max_finished = 2});
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(Submit(*c, absl::StrCat("j", i)).id());
    ASSERT_TRUE(cluster_.AwaitRunning(ids.back()));
    cluster_.End(Eval{});
  }
  // The last End returned once its run did; its record follows under the lock.
  for (int i = 0; i < 3000 && c->List("alice").size() != 2u; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_THAT(States(c->List("alice")), ElementsAre("j2:2:0", "j3:2:0"));
  EXPECT_FALSE(fs::exists(dir + "/" + ids[0]));
  EXPECT_TRUE(fs::exists(dir + "/" + ids[3] + "/record.pb"));
}

}  // namespace
}  // namespace tessera::jobs

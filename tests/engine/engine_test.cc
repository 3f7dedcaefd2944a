// Behaviour of both engines beyond the ordering rule (see engine_oracle_test.cc):
// asynchronous completion, deletion while pending, priorities, errors, misuse.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_count.h"
#include "core/status_matchers.h"
#include "engine/create_engine.h"
#include "engine/omp_threads.h"
#include "engine/profiler.h"
#include "gtest/gtest.h"

namespace tessera::engine {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

absl::Status Ok() { return absl::OkStatus(); }

// A one-shot gate functions can block on.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> g(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return open_; });
  }
  // False when not opened within `ms`.
  bool WaitFor(int ms) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(ms), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

std::unique_ptr<Engine> MakeEngine(EngineOptions::Kind kind, int workers = 2) {
  EngineOptions o;
  o.kind = kind;
  o.cpu_workers = workers;
  auto e = CreateEngine(o);
  EXPECT_THAT(e, IsOk());
  return *std::move(e);
}

// Waits (up to 10 s) until `order` holds `n` entries. Not WaitForAll: the waiting thread
// would help run the queue, a second consumer that changes the order under test.
void AwaitRecorded(std::mutex& mu, const std::vector<int>& order, size_t n) {
  for (int i = 0; i < 10000; ++i) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (order.size() == n) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

class BothEnginesTest : public ::testing::TestWithParam<EngineOptions::Kind> {
 protected:
  std::unique_ptr<Engine> engine_ = MakeEngine(GetParam());
};

TEST_P(BothEnginesTest, WritesThenReadsSeeTheValue) {
  VarHandle v = engine_->NewVariable();
  int value = 0;
  for (int i = 1; i <= 100; ++i) {
    ASSERT_THAT(engine_->PushSync([&, i](RunContext) { value = value * 3 % 1000003 + i; return Ok(); },
                                  Context::CPU(), {}, {v}),
                IsOk());
  }
  int seen = -1;
  ASSERT_THAT(engine_->PushSync([&](RunContext) { seen = value; return Ok(); }, Context::CPU(),
                                {v}, {}),
              IsOk());
  ASSERT_THAT(engine_->WaitForVar(v), IsOk());
  int expected = 0;
  for (int i = 1; i <= 100; ++i) expected = expected * 3 % 1000003 + i;
  EXPECT_EQ(seen, expected);
}

TEST_P(BothEnginesTest, AsyncFunctionsCompleteFromOtherThreads) {
  VarHandle v = engine_->NewVariable();
  std::vector<int> log;
  std::vector<std::thread> helpers;
  std::mutex helpers_mu;
  for (int i = 0; i < 20; ++i) {
    ASSERT_THAT(engine_->PushAsync(
                    [&, i](RunContext, CallbackOnComplete done) {
                      std::lock_guard<std::mutex> g(helpers_mu);
                      helpers.emplace_back([&, i, done] {
                        std::this_thread::sleep_for(std::chrono::microseconds(200));
                        log.push_back(i);  // ordered by the engine, not by a lock
                        done();
                      });
                    },
                    Context::CPU(), {}, {v}, FnProperty::kNormal, 0, "async_append"),
                IsOk());
  }
  ASSERT_THAT(engine_->WaitForVar(v), IsOk());
  std::vector<int> expected(20);
  for (int i = 0; i < 20; ++i) expected[i] = i;
  EXPECT_EQ(log, expected);
  std::lock_guard<std::mutex> g(helpers_mu);
  for (auto& t : helpers) t.join();
}

TEST_P(BothEnginesTest, DeleteVariableRunsAfterPendingUses) {
  VarHandle v = engine_->NewVariable();
  std::atomic<int> uses{0};
  std::atomic<int> uses_at_delete{-1};
  for (int i = 0; i < 50; ++i) {
    ASSERT_THAT(engine_->PushSync(
                    [&](RunContext) {
                      std::this_thread::sleep_for(std::chrono::microseconds(50));
                      uses++;
                      return Ok();
                    },
                    Context::CPU(), i % 2 ? std::vector<VarHandle>{v} : std::vector<VarHandle>{},
                    i % 2 ? std::vector<VarHandle>{} : std::vector<VarHandle>{v}),
                IsOk());
  }
  ASSERT_THAT(engine_->DeleteVariable([&](RunContext) { uses_at_delete = uses.load(); return Ok(); },
                                      Context::CPU(), v),
              IsOk());
  ASSERT_THAT(engine_->WaitForAll(), IsOk());
  EXPECT_EQ(uses_at_delete.load(), 50);
  // The handle is now stale: every use is a clear error, never undefined behaviour.
  EXPECT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {v}, {},
                                FnProperty::kNormal, 0, "late_reader"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'late_reader': const_vars[0] is a deleted variable")));
  EXPECT_THAT(engine_->WaitForVar(v), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deleted")));
  EXPECT_THAT(engine_->DeleteVariable(nullptr, Context::CPU(), v),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already deleted")));
  // A recycled slot gets a new generation: the old handle stays invalid.
  VarHandle fresh = engine_->NewVariable();
  EXPECT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {v}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {fresh}),
              IsOk());
}

TEST_P(BothEnginesTest, UnknownVariablesAndContextsAreErrors) {
  VarHandle unknown;
  EXPECT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {unknown},
                                FnProperty::kNormal, 0, "f"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mutate_vars[0] is a null (unknown) variable")));
  auto other = MakeEngine(GetParam());
  VarHandle foreign = other->NewVariable();
  EXPECT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {foreign}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("another engine")));
  EXPECT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::GPU(99), {}, {},
                                FnProperty::kNormal, 0, "gpu_fn"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("'gpu_fn': gpu(99) is not available")));
}

TEST_P(BothEnginesTest, DuplicateAndReadWriteVariablesAreFolded) {
  VarHandle v = engine_->NewVariable();
  int value = 0;
  // v listed as read twice and written twice: must run exactly once as a writer.
  for (int i = 0; i < 10; ++i) {
    ASSERT_THAT(engine_->PushSync([&](RunContext) { value++; return Ok(); }, Context::CPU(),
                                  {v, v}, {v, v}),
                IsOk());
  }
  ASSERT_THAT(engine_->WaitForVar(v), IsOk());
  EXPECT_EQ(value, 10);
}

TEST_P(BothEnginesTest, PrebuiltOperatorSurvivesDeletionUntilItsPushesRan) {
  VarHandle v = engine_->NewVariable();
  std::atomic<int> runs{0};
  auto op = engine_->NewOperator(
      [&](RunContext, CallbackOnComplete done) {
        runs++;
        done();
      },
      {}, {v}, FnProperty::kNormal, "counter");
  ASSERT_THAT(op, IsOk());
  for (int i = 0; i < 100; ++i) ASSERT_THAT(engine_->Push(*op, Context::CPU()), IsOk());
  ASSERT_THAT(engine_->DeleteOperator(*op), IsOk());
  EXPECT_THAT(engine_->Push(*op, Context::CPU()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deleted operator")));
  EXPECT_THAT(engine_->DeleteOperator(*op), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(engine_->WaitForAll(), IsOk());
  EXPECT_EQ(runs.load(), 100);
}

TEST_P(BothEnginesTest, FailuresPropagateToDependentsAndAreReportedOnce) {
  VarHandle a = engine_->NewVariable(), b = engine_->NewVariable(), c = engine_->NewVariable();
  std::atomic<int> dependent_runs{0}, unrelated_runs{0};
  ASSERT_THAT(engine_->PushSync([](RunContext) { return absl::DataLossError("disk gone"); },
                                Context::CPU(), {}, {a}, FnProperty::kNormal, 0, "load_batch"),
              IsOk());
  ASSERT_THAT(engine_->PushSync([&](RunContext) { dependent_runs++; return Ok(); }, Context::CPU(),
                                {a}, {b}, FnProperty::kNormal, 0, "use_batch"),
              IsOk());
  ASSERT_THAT(engine_->PushSync([&](RunContext) { unrelated_runs++; return Ok(); },
                                Context::CPU(), {}, {c}),
              IsOk());
  // The failure reached b through use_batch, which was skipped.
  EXPECT_THAT(engine_->WaitForVar(b),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("function 'load_batch' failed: disk gone")));
  EXPECT_EQ(dependent_runs.load(), 0);
  EXPECT_THAT(engine_->WaitForVar(c), IsOk());
  EXPECT_EQ(unrelated_runs.load(), 1);
  // Reported once: a and b are usable again, and WaitForAll has nothing left to report.
  EXPECT_THAT(engine_->WaitForVar(a), IsOk());
  EXPECT_THAT(engine_->WaitForAll(), IsOk());
  ASSERT_THAT(engine_->PushSync([&](RunContext) { dependent_runs++; return Ok(); }, Context::CPU(),
                                {a}, {b}),
              IsOk());
  EXPECT_THAT(engine_->WaitForVar(b), IsOk());
  EXPECT_EQ(dependent_runs.load(), 1);
}

TEST_P(BothEnginesTest, ExceptionsAndAsyncErrorsBecomeStatuses) {
  VarHandle v = engine_->NewVariable();
  ASSERT_THAT(engine_->PushSync([](RunContext) -> absl::Status { throw std::runtime_error("boom"); },
                                Context::CPU(), {}, {v}, FnProperty::kNormal, 0, "thrower"),
              IsOk());
  EXPECT_THAT(engine_->WaitForAll(), StatusIs(absl::StatusCode::kInternal,
                                              HasSubstr("'thrower' failed: exception: boom")));
  ASSERT_THAT(engine_->PushAsync(
                  [](RunContext, CallbackOnComplete done) {
                    done(absl::UnavailableError("peer hung up"));
                  },
                  Context::CPU(), {}, {v}, FnProperty::kNormal, 0, "recv"),
              IsOk());
  EXPECT_THAT(engine_->WaitForVar(v),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("'recv' failed: peer hung up")));
  EXPECT_THAT(engine_->WaitForAll(), IsOk());
}

TEST_P(BothEnginesTest, WaitingFromInsideAFunctionIsAnError) {
  VarHandle v = engine_->NewVariable(), w = engine_->NewVariable();
  absl::Status inner_var, inner_all;
  ASSERT_THAT(engine_->PushSync(
                  [&](RunContext) {
                    inner_var = engine_->WaitForVar(w);
                    inner_all = engine_->WaitForAll();
                    return Ok();
                  },
                  Context::CPU(), {}, {v}),
              IsOk());
  ASSERT_THAT(engine_->WaitForAll(), IsOk());
  EXPECT_THAT(inner_var, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("deadlock")));
  EXPECT_THAT(inner_all, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("deadlock")));
}

TEST_P(BothEnginesTest, PushesFromManyThreadsAtOnce) {
  constexpr int kThreads = 4, kPerThread = 2000;
  VarHandle shared = engine_->NewVariable();
  long total = 0;  // mutated only by engine functions that hold `shared`
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      VarHandle mine = engine_->NewVariable();
      for (int i = 0; i < kPerThread; ++i) {
        ASSERT_THAT(engine_->PushSync([&](RunContext) { total += 1; return Ok(); }, Context::CPU(),
                                      {mine}, {shared}),
                    IsOk());
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_THAT(engine_->WaitForVar(shared), IsOk());
  EXPECT_EQ(total, kThreads * kPerThread);
}

TEST_P(BothEnginesTest, ProfilerWritesOneChromeEventPerFunction) {
  engine_->profiler().Start(Profiler::Mode::kMarked);
  VarHandle v = engine_->NewVariable();
  for (int i = 0; i < 5; ++i) {
    ASSERT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {v},
                                  FnProperty::kNormal, 0, "conv1_forward", /*profiling=*/true),
                IsOk());
  }
  ASSERT_THAT(engine_->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {v},
                                FnProperty::kNormal, 0, "unmarked"),
              IsOk());
  ASSERT_THAT(engine_->WaitForAll(), IsOk());
  engine_->profiler().Stop();
  std::vector<ProfileEvent> events = engine_->profiler().events();
  ASSERT_EQ(events.size(), 5u);
  for (const ProfileEvent& e : events) {
    EXPECT_STREQ(e.name, "conv1_forward");
    EXPECT_EQ(e.ctx, Context::CPU());
    EXPECT_LE(e.start_ns, e.end_ns);
    EXPECT_NE(e.thread_id, 0u);
  }
  std::string json = engine_->profiler().ChromeTraceJson();
  EXPECT_THAT(json, HasSubstr(R"("name": "conv1_forward", "cat": "normal", "ph": "X")"));
  EXPECT_THAT(json, HasSubstr(R"j("args": {"name": "cpu(0)"})j"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("unmarked")));
}

TEST_P(BothEnginesTest, OmpThreadsPerWorkerIsSettable) {
  EXPECT_GE(engine_->num_omp_threads_per_worker(), 1);
  engine_->set_num_omp_threads_per_worker(3);
  EXPECT_EQ(engine_->num_omp_threads_per_worker(), 3);
  engine_->set_num_omp_threads_per_worker(0);
  EXPECT_EQ(engine_->num_omp_threads_per_worker(), 1);
}

TEST_P(BothEnginesTest, ShutdownWithWorkStillQueuedRunsItAll) {
  std::atomic<int> ran{0};
  {
    auto engine = MakeEngine(GetParam());
    VarHandle v = engine->NewVariable();
    for (int i = 0; i < 5000; ++i) {
      ASSERT_THAT(engine->PushSync([&](RunContext) { ran++; return Ok(); }, Context::CPU(),
                                   i % 3 ? std::vector<VarHandle>{} : std::vector<VarHandle>{v},
                                   {}),
                  IsOk());
    }
    engine->NotifyShutdown();
  }  // destroyed with work queued: no hang, no leak (LeakSanitizer under --config=asan)
  EXPECT_EQ(ran.load(), 5000);
}

INSTANTIATE_TEST_SUITE_P(Engines, BothEnginesTest,
                         ::testing::Values(EngineOptions::Kind::kNaive,
                                           EngineOptions::Kind::kThreaded),
                         [](const auto& info) {
                           return info.param == EngineOptions::Kind::kNaive ? "Naive" : "Threaded";
                         });

// ---- Threaded engine only ----

TEST(ThreadedEngineTest, ReadersOfOneVersionRunTogether) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 2);
  VarHandle v = engine->NewVariable();
  Gate first_started, second_started;
  bool first_saw_second = false, second_saw_first = false;
  ASSERT_THAT(engine->PushSync([&](RunContext) {
                first_started.Open();
                first_saw_second = second_started.WaitFor(5000);
                return Ok();
              }, Context::CPU(), {v}, {}), IsOk());
  ASSERT_THAT(engine->PushSync([&](RunContext) {
                second_started.Open();
                second_saw_first = first_started.WaitFor(5000);
                return Ok();
              }, Context::CPU(), {v}, {}), IsOk());
  ASSERT_THAT(engine->WaitForAll(), IsOk());
  EXPECT_TRUE(first_saw_second && second_saw_first) << "two readers did not overlap";
}

TEST(ThreadedEngineTest, PendingFunctionsCountsWaitingAndRunningOnes) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 2);
  EXPECT_EQ(engine->pending_functions(), 0);
  VarHandle v = engine->NewVariable();
  Gate started, release;
  ASSERT_THAT(engine->PushSync(
                  [&](RunContext) {
                    started.Open();
                    release.WaitFor(5000);
                    return Ok();
                  },
                  Context::CPU(), {}, {v}),
              IsOk());
  for (int i = 0; i < 3; ++i) {  // wait for the first: v is mutated by it
    ASSERT_THAT(engine->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {v}, {}), IsOk());
  }
  ASSERT_TRUE(started.WaitFor(5000));
  EXPECT_EQ(engine->pending_functions(), 4);
  release.Open();
  ASSERT_THAT(engine->WaitForAll(), IsOk());
  EXPECT_EQ(engine->pending_functions(), 0);
}

TEST(ThreadedEngineTest, PrioritiesAreHonouredWhenThePoolIsSaturated) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 1);
  Gate blocker_running, release;
  ASSERT_THAT(engine->PushSync([&](RunContext) {
                blocker_running.Open();
                release.Wait();
                return Ok();
              }, Context::CPU(), {}, {}), IsOk());
  blocker_running.Wait();  // the only worker is busy: everything below queues up
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 30; ++i) {
    int priority = (i * 7) % 3;  // interleaved 0, 1, 2
    ASSERT_THAT(engine->PushSync([&, priority](RunContext) {
                  std::lock_guard<std::mutex> g(mu);
                  order.push_back(priority);
                  return Ok();
                }, Context::CPU(), {}, {}, FnProperty::kNormal, priority), IsOk());
  }
  release.Open();
  AwaitRecorded(mu, order, 30);
  ASSERT_THAT(engine->WaitForAll(), IsOk());
  ASSERT_EQ(order.size(), 30u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end(), std::greater<int>()))
      << "functions ran out of priority order";
}

// Workers take batches of ready functions; one that blocks must not keep its batch-mates
// from the other workers. Function 0 waits for function 1, pushed right after it: they
// are ready together and usually land in one worker's batch.
TEST(ThreadedEngineTest, ABlockedFunctionDoesNotHoldItsBatchMatesHostage) {
  for (int round = 0; round < 20; ++round) {
    auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 2);
    Gate hold, second_ran;
    std::atomic<bool> timed_out{false};
    // Both workers busy, so a backlog builds up and each takes a batch when released.
    for (int w = 0; w < 2; ++w) {
      ASSERT_THAT(engine->PushSync([&](RunContext) { hold.Wait(); return Ok(); }, Context::CPU(),
                                   {}, {}), IsOk());
    }
    ASSERT_THAT(engine->PushSync([&](RunContext) {
                  if (!second_ran.WaitFor(10000)) timed_out = true;
                  return Ok();
                }, Context::CPU(), {}, {}), IsOk());
    ASSERT_THAT(engine->PushSync([&](RunContext) { second_ran.Open(); return Ok(); },
                                 Context::CPU(), {}, {}), IsOk());
    for (int i = 0; i < 30; ++i) {
      ASSERT_THAT(engine->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {}),
                  IsOk());
    }
    hold.Open();
    ASSERT_THAT(engine->WaitForAll(), IsOk());
    ASSERT_FALSE(timed_out) << "round " << round << ": function 1 never ran while 0 blocked";
  }
}

// A function pushed with a higher priority while a worker runs a batch goes before the
// rest of that batch.
TEST(ThreadedEngineTest, AMoreUrgentFunctionOvertakesABufferedBatch) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 1);
  Gate hold, first_running, release_first;
  std::mutex mu;
  std::vector<int> order;
  auto record = [&](int id) {
    std::lock_guard<std::mutex> g(mu);
    order.push_back(id);
  };
  ASSERT_THAT(engine->PushSync([&](RunContext) { hold.Wait(); return Ok(); }, Context::CPU(), {},
                               {}), IsOk());
  ASSERT_THAT(engine->PushSync([&](RunContext) {
                record(0);
                first_running.Open();
                release_first.Wait();
                return Ok();
              }, Context::CPU(), {}, {}), IsOk());
  for (int i = 1; i < 10; ++i) {
    ASSERT_THAT(engine->PushSync([&, i](RunContext) { record(i); return Ok(); }, Context::CPU(),
                                 {}, {}), IsOk());
  }
  hold.Open();
  first_running.Wait();  // the worker took functions 0..9 as one batch and runs 0
  ASSERT_THAT(engine->PushSync([&](RunContext) { record(100); return Ok(); }, Context::CPU(), {},
                               {}, FnProperty::kNormal, /*priority=*/5), IsOk());
  release_first.Open();
  AwaitRecorded(mu, order, 11);
  ASSERT_THAT(engine->WaitForAll(), IsOk());
  ASSERT_EQ(order.size(), 11u);
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(order[1], 100) << "the urgent function waited behind the buffered batch";
}

// A worker keeps a function its completion made ready only while it runs its loop: an
// asynchronous function completed from inside another function's body must not park its
// dependents on the busy worker while its peer sleeps.
TEST(ThreadedEngineTest, ACallbackFromInsideABodyDoesNotParkWorkOnTheBusyWorker) {
  EngineOptions o;
  o.kind = EngineOptions::Kind::kThreaded;
  o.cpu_workers = 2;
  o.spin_us = 0;  // idle workers go to sleep at once
  auto made = CreateEngine(o);
  ASSERT_THAT(made, IsOk());
  Engine& engine = **made;
  VarHandle v = engine.NewVariable();
  std::mutex mu;
  CallbackOnComplete pending;
  Gate started, dependent_ran, body_done;
  std::atomic<bool> timed_out{false};
  ASSERT_THAT(engine.PushAsync([&](RunContext, CallbackOnComplete done) {
                std::lock_guard<std::mutex> g(mu);
                pending = std::move(done);
                started.Open();
              }, Context::CPU(), {}, {v}), IsOk());
  ASSERT_THAT(engine.PushSync([&](RunContext) { dependent_ran.Open(); return Ok(); },
                              Context::CPU(), {v}, {}), IsOk());
  ASSERT_THAT(engine.PushSync([&](RunContext) {
                started.Wait();
                std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the peer sleeps
                CallbackOnComplete done;
                {
                  std::lock_guard<std::mutex> g(mu);
                  done = std::move(pending);
                }
                done(absl::OkStatus());
                if (!dependent_ran.WaitFor(3000)) timed_out = true;
                body_done.Open();
                return Ok();
              }, Context::CPU(), {}, {}), IsOk());
  body_done.Wait();  // not WaitForAll: the waiting thread would run the dependent itself
  ASSERT_THAT(engine.WaitForAll(), IsOk());
  EXPECT_FALSE(timed_out) << "the reader of v waited for the body that completed its writer";
}

TEST(ThreadedEngineTest, PrioritizedQueueBypassesABusyPool) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 1);
  Gate release, prioritized_ran;
  ASSERT_THAT(engine->PushSync([&](RunContext) { release.Wait(); return Ok(); }, Context::CPU(),
                               {}, {}), IsOk());
  ASSERT_THAT(engine->PushSync([&](RunContext) { prioritized_ran.Open(); return Ok(); },
                               Context::CPU(), {}, {}, FnProperty::kCPUPrioritized), IsOk());
  EXPECT_TRUE(prioritized_ran.WaitFor(5000));
  release.Open();
  ASSERT_THAT(engine->WaitForAll(), IsOk());
}

// oneDNN's kernels size their OpenMP team by the thread that runs them: compute workers use
// num_omp_threads_per_worker (also after it changes), the prioritized pool one thread.
TEST(ThreadedEngineTest, WorkersRunFunctionsWithTheirOpenMpThreads) {
  EngineOptions o;
  o.kind = EngineOptions::Kind::kThreaded;
  o.cpu_workers = 1;
  o.omp_threads_per_worker = 3;
  auto made = CreateEngine(o);
  ASSERT_THAT(made, IsOk());
  Engine& engine = **made;
  EXPECT_EQ(engine.num_omp_threads_per_worker(), 3);
  VarHandle v = engine.NewVariable();
  // The thread's OpenMP setting and the function's RunContext::cpu_threads.
  const auto threads_in_a_function = [&](FnProperty prop) {
    std::atomic<int> omp{0}, cpu{0};
    EXPECT_THAT(engine.PushSync(
                    [&](RunContext rctx) {
                      omp = omp_get_max_threads();
                      cpu = rctx.cpu_threads;
                      return Ok();
                    },
                    Context::CPU(), {}, {v}, prop),
                IsOk());
    EXPECT_THAT(engine.WaitForVar(v), IsOk());
    return std::pair<int, int>(omp.load(), cpu.load());
  };
  EXPECT_EQ(threads_in_a_function(FnProperty::kNormal), std::pair(3, 3));
  EXPECT_EQ(threads_in_a_function(FnProperty::kCPUPrioritized), std::pair(1, 1));
  engine.set_num_omp_threads_per_worker(2);
  EXPECT_EQ(threads_in_a_function(FnProperty::kNormal), std::pair(2, 2));
  ASSERT_THAT(engine.DeleteVariable(nullptr, Context::CPU(), v), IsOk());
}

// Unset, the compute workers share the CPUs the process may use, but the pusher's one;
// OMP_NUM_THREADS (the tsan config sets it) wins over that.
TEST(ThreadedEngineTest, OmpThreadsDefaultToTheCpusLeftByThePusher) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 1);
  const int expected = std::getenv("OMP_NUM_THREADS") != nullptr
                           ? omp_get_max_threads()
                           : std::max(1, AvailableCpus() - 1);
  EXPECT_EQ(engine->num_omp_threads_per_worker(), expected);
}

// RunContext::cpu_threads on the one compute worker of an engine with default OpenMP
// settings: every CPU, or OMP_NUM_THREADS where it is set (the tsan config sets it).
int OneWorkersCpuThreads() {
  return std::getenv("OMP_NUM_THREADS") != nullptr ? omp_get_max_threads() : AvailableCpus();
}

// Unset, one function's large kernels may use every CPU the compute workers share, the
// pusher's included (it waits while they run); a function that a caller runs while it helps
// in WaitForAll (every compute worker busy) gets one thread, as the workers' teams already
// hold the CPUs.
TEST(ThreadedEngineTest, FunctionsMayUseTheWorkersShareOfAllCpus) {
  auto made = MakeEngine(EngineOptions::Kind::kThreaded, 1);
  Engine& engine = *made;
  const int expected = OneWorkersCpuThreads();
  Gate first_running, release;
  std::atomic<int> worker_threads{0}, helped_threads{0};
  std::atomic<bool> helped_on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  ASSERT_THAT(engine.PushSync(
                  [&](RunContext rctx) {
                    worker_threads = rctx.cpu_threads;
                    first_running.Open();
                    EXPECT_TRUE(release.WaitFor(10000));
                    return Ok();
                  },
                  Context::CPU(), {}, {}),
              IsOk());
  ASSERT_TRUE(first_running.WaitFor(10000));
  // The only worker is busy: this one waits in the queue until WaitForAll's caller takes it.
  ASSERT_THAT(engine.PushSync(
                  [&](RunContext rctx) {
                    helped_threads = rctx.cpu_threads;
                    helped_on_caller = std::this_thread::get_id() == caller;
                    release.Open();
                    return Ok();
                  },
                  Context::CPU(), {}, {}),
              IsOk());
  ASSERT_THAT(engine.WaitForAll(), IsOk());
  EXPECT_EQ(worker_threads.load(), expected);
  EXPECT_TRUE(helped_on_caller.load());
  EXPECT_EQ(helped_threads.load(), 1);
}

// While a compute worker is free, WaitForAll's caller leaves the queue to it: the function
// runs on the worker with the workers' share of the CPUs, not on the caller's one thread
// (large kernels took 1.7-1.9x as long there).
TEST(ThreadedEngineTest, WaitForAllLeavesWorkToAFreeWorker) {
  auto made = MakeEngine(EngineOptions::Kind::kThreaded, 1);
  Engine& engine = *made;
  const int expected = OneWorkersCpuThreads();
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> on_caller{true};
    std::atomic<int> threads{0};
    ASSERT_THAT(engine.PushSync(
                    [&](RunContext rctx) {
                      on_caller = std::this_thread::get_id() == caller;
                      threads = rctx.cpu_threads;
                      return Ok();
                    },
                    Context::CPU(), {}, {}),
                IsOk());
    ASSERT_THAT(engine.WaitForAll(), IsOk());
    EXPECT_FALSE(on_caller.load()) << "round " << round;
    EXPECT_EQ(threads.load(), expected) << "round " << round;
  }
}

// A kernel wakes one more thread per kFlopsPerThread of work, never more than it may use.
TEST(OmpThreadsTest, ThreadsForWorkGrowWithTheWork) {
  EXPECT_EQ(ThreadsForWork(0, 8), 1);
  EXPECT_EQ(ThreadsForWork(1.9 * kFlopsPerThread, 8), 1);
  EXPECT_EQ(ThreadsForWork(2 * kFlopsPerThread, 8), 2);
  EXPECT_EQ(ThreadsForWork(5.5 * kFlopsPerThread, 8), 5);
  EXPECT_EQ(ThreadsForWork(1e15, 8), 8);
  EXPECT_EQ(ThreadsForWork(1e15, 1), 1);
  EXPECT_EQ(ThreadsForWork(1e15, 0), 1);
}

TEST(OmpThreadsTest, ThreadsForBytesGrowWithTheBytes) {
  EXPECT_EQ(ThreadsForBytes(0, 8), 1);
  EXPECT_EQ(ThreadsForBytes(1.9 * kBytesPerThread, 8), 1);
  EXPECT_EQ(ThreadsForBytes(3 * kBytesPerThread, 8), 3);
  EXPECT_EQ(ThreadsForBytes(1e15, 4), 4);
  EXPECT_EQ(ThreadsForBytes(1e15, 0), 1);
}

TEST(ThreadedEngineTest, WaitForVarWaitsForEarlierReadersToo) {
  auto engine = MakeEngine(EngineOptions::Kind::kThreaded, 2);
  VarHandle v = engine->NewVariable();
  std::atomic<bool> reader_done{false};
  ASSERT_THAT(engine->PushSync([&](RunContext) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                reader_done = true;
                return Ok();
              }, Context::CPU(), {v}, {}), IsOk());
  ASSERT_THAT(engine->WaitForVar(v), IsOk());
  EXPECT_TRUE(reader_done.load());
}

TEST(EngineOptionsTest, FromEnvNamesTheBadVariable) {
  setenv("TESSERA_CPU_WORKER_NTHREADS", "many", 1);
  EXPECT_THAT(EngineOptions::FromEnv(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TESSERA_CPU_WORKER_NTHREADS='many'")));
  setenv("TESSERA_CPU_WORKER_NTHREADS", "3", 1);
  setenv("TESSERA_ENGINE", "Naive", 1);
  auto o = EngineOptions::FromEnv();
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->cpu_workers, 3);
  EXPECT_EQ(o->kind, EngineOptions::Kind::kNaive);
  setenv("TESSERA_ENGINE", "turbo", 1);
  EXPECT_THAT(EngineOptions::FromEnv(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TESSERA_ENGINE='turbo'")));
  unsetenv("TESSERA_ENGINE");
  unsetenv("TESSERA_CPU_WORKER_NTHREADS");
}

TEST(EngineOptionsTest, ProfilerPathTakesTheProcessId) {
  setenv("TESSERA_PROFILER", "/tmp/trace-%p.json", 1);
  auto o = EngineOptions::FromEnv();
  unsetenv("TESSERA_PROFILER");
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->profile_path, absl::StrCat("/tmp/trace-", getpid(), ".json"));
}

TEST(EngineOptionsTest, ProfilerEnvWritesATraceAtExit) {
  std::string path = absl::StrCat(::testing::TempDir(), "/engine_trace.json");
  EngineOptions o;
  o.profile_path = path;
  {
    auto engine = CreateEngine(o);
    ASSERT_THAT(engine, IsOk());
    VarHandle v = (*engine)->NewVariable();
    ASSERT_THAT((*engine)->PushSync([](RunContext) { return Ok(); }, Context::CPU(), {}, {v},
                                    FnProperty::kNormal, 0, "traced_fn"),
                IsOk());
  }
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr(R"("traceEvents")"));
  EXPECT_THAT(text, HasSubstr(R"("name": "traced_fn")"));
}

}  // namespace
}  // namespace tessera::engine

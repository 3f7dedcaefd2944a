// Randomized oracle test of the engine's dependency rule.
//
// Two threads push thousands of functions with random read/write sets over a few dozen
// variables. Each function logs, per variable, how many writes it saw before it; writers
// also check that nobody else holds the variable. The logs must then be explainable by
// one sequential execution of all pushes in an order that keeps each thread's push order:
//   - no writer ever overlapped another use of its variable;
//   - per variable, writes are numbered 0..k-1 with no gaps or repeats;
//   - the "happened before" edges (per-variable order plus per-thread push order) form
//     no cycle, so such a sequential order exists;
//   - with a single pushing thread that order is the push order itself: every function saw
//     exactly the writes pushed before it.
// Run on both engines, several worker counts, with synchronous and asynchronous functions.
#include <atomic>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "engine/create_engine.h"
#include "gtest/gtest.h"

namespace tessera::engine {
namespace {

using ::tessera::testing::IsOk;

constexpr int kNumVars = 32;

struct PlannedOp {
  int thread = 0;
  int index_in_thread = 0;
  std::vector<int> reads;   // may overlap writes and repeat: the engine must fold them
  std::vector<int> writes;
  bool async = false;
  int priority = 0;
};

struct Observation {
  // Per variable the function touched: writes seen before it ran (its own excluded).
  std::vector<std::pair<int, int>> seen;  // (var, writes before)
};

// State a function reads and writes, per variable. Accessed only by functions, so any
// overlap the engine wrongly allows shows up in `holders`.
struct SharedVar {
  std::atomic<int> holders{0};  // > 0: readers; -1: a writer
  int writes = 0;               // plain int: a data race here is a bug TSan reports
};

class CompletionThread {
 public:
  CompletionThread() : thread_([this] { Loop(); }) {}
  ~CompletionThread() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::function<void()> f) {
    // Notify under the lock: once the work is taken, the test may finish and destroy
    // this object while a poster that had unlocked would still be inside notify.
    std::lock_guard<std::mutex> g(mu_);
    work_.push_back(std::move(f));
    cv_.notify_all();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return done_ || !work_.empty(); });
      if (work_.empty()) return;
      auto f = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      f();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  bool done_ = false;
  std::thread thread_;
};

struct OracleCase {
  EngineOptions::Kind kind;
  int workers;
  int pushers;
};

std::string CaseName(const ::testing::TestParamInfo<OracleCase>& info) {
  return absl::StrCat(info.param.kind == EngineOptions::Kind::kNaive ? "Naive" : "Threaded",
                      info.param.workers, "Workers", info.param.pushers, "Pushers");
}

class EngineOracleTest : public ::testing::TestWithParam<OracleCase> {};

TEST_P(EngineOracleTest, ObservedOrdersFollowTheRule) {
  const OracleCase param = GetParam();
  EngineOptions options;
  options.kind = param.kind;
  options.cpu_workers = param.workers;
  auto engine_or = CreateEngine(options);
  ASSERT_THAT(engine_or, IsOk());
  std::unique_ptr<Engine> engine = *std::move(engine_or);

  constexpr int kOpsPerThread = 2500;
  std::mt19937 rng(1234 + param.workers * 7 + param.pushers);
  std::vector<std::vector<PlannedOp>> plans(param.pushers);
  for (int t = 0; t < param.pushers; ++t) {
    for (int i = 0; i < kOpsPerThread; ++i) {
      PlannedOp op;
      op.thread = t;
      op.index_in_thread = i;
      int nreads = std::uniform_int_distribution<int>(0, 4)(rng);
      int nwrites = std::uniform_int_distribution<int>(0, 2)(rng);
      for (int k = 0; k < nreads; ++k) op.reads.push_back(rng() % kNumVars);
      for (int k = 0; k < nwrites; ++k) op.writes.push_back(rng() % kNumVars);
      op.async = rng() % 5 == 0;
      op.priority = static_cast<int>(rng() % 3);
      plans[t].push_back(std::move(op));
    }
  }

  std::vector<VarHandle> handles(kNumVars);
  for (auto& h : handles) h = engine->NewVariable();
  std::vector<SharedVar> vars(kNumVars);
  std::vector<std::vector<Observation>> observed(param.pushers,
                                                 std::vector<Observation>(kOpsPerThread));
  std::atomic<int> violations{0};
  CompletionThread completer;

  auto body = [&](const PlannedOp& op) {
    // Effective sets: a variable both read and written counts as written.
    std::vector<int> writes = op.writes;
    std::sort(writes.begin(), writes.end());
    writes.erase(std::unique(writes.begin(), writes.end()), writes.end());
    std::vector<int> reads;
    for (int r : op.reads) {
      if (!std::binary_search(writes.begin(), writes.end(), r) &&
          std::find(reads.begin(), reads.end(), r) == reads.end()) {
        reads.push_back(r);
      }
    }
    for (int r : reads) {
      if (vars[r].holders.fetch_add(1) < 0) violations++;
    }
    for (int w : writes) {
      int expected = 0;
      if (!vars[w].holders.compare_exchange_strong(expected, -1)) violations++;
    }
    Observation& obs = observed[op.thread][op.index_in_thread];
    for (int r : reads) obs.seen.emplace_back(r, vars[r].writes);
    for (int w : writes) obs.seen.emplace_back(w, vars[w].writes++);
    std::this_thread::yield();  // widen the window in which a wrong overlap would show
    for (int w : writes) vars[w].holders.store(0);
    for (int r : reads) vars[r].holders.fetch_sub(1);
  };

  auto pusher = [&](int t) {
    for (const PlannedOp& op : plans[t]) {
      std::vector<VarHandle> reads, writes;
      for (int r : op.reads) reads.push_back(handles[r]);
      for (int w : op.writes) writes.push_back(handles[w]);
      absl::Status s;
      if (op.async) {
        s = engine->PushAsync(
            [&, op_ptr = &op](RunContext, CallbackOnComplete done) {
              // Finish on another thread, as an I/O function would.
              completer.Post([&, op_ptr, done] {
                body(*op_ptr);
                done();
              });
            },
            Context::CPU(), reads, writes, FnProperty::kNormal, op.priority, "oracle_async");
      } else {
        s = engine->PushSync(
            [&, op_ptr = &op](RunContext) {
              body(*op_ptr);
              return absl::OkStatus();
            },
            Context::CPU(), reads, writes, FnProperty::kNormal, op.priority, "oracle_sync");
      }
      if (!s.ok()) violations++;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < param.pushers; ++t) threads.emplace_back(pusher, t);
  for (auto& th : threads) th.join();
  ASSERT_THAT(engine->WaitForAll(), IsOk());
  EXPECT_EQ(violations.load(), 0) << "a writer overlapped another use of its variable";

  // Number every function, then build happened-before edges.
  std::vector<int> first_id(param.pushers);
  int n = 0;
  for (int t = 0; t < param.pushers; ++t) {
    first_id[t] = n;
    n += kOpsPerThread;
  }
  std::vector<std::vector<int>> edges(n);
  // Per variable: writer of index i, and readers that saw i writes.
  std::vector<std::vector<int>> writer_of(kNumVars);
  std::vector<std::vector<std::vector<int>>> readers_at(kNumVars);
  for (int t = 0; t < param.pushers; ++t) {
    for (int i = 0; i < kOpsPerThread; ++i) {
      const PlannedOp& op = plans[t][i];
      int id = first_id[t] + i;
      if (i > 0) edges[id - 1].push_back(id);  // push order within a thread
      for (auto [v, before] : observed[t][i].seen) {
        bool is_write = std::find(op.writes.begin(), op.writes.end(), v) != op.writes.end();
        if (is_write) {
          if (writer_of[v].size() <= static_cast<size_t>(before)) writer_of[v].resize(before + 1, -1);
          EXPECT_EQ(writer_of[v][before], -1) << "two writers of var " << v << " saw " << before;
          writer_of[v][before] = id;
        } else {
          if (readers_at[v].size() <= static_cast<size_t>(before)) readers_at[v].resize(before + 1);
          readers_at[v][before].push_back(id);
        }
      }
    }
  }
  for (int v = 0; v < kNumVars; ++v) {
    const auto& w = writer_of[v];
    EXPECT_EQ(vars[v].writes, static_cast<int>(w.size())) << "var " << v;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NE(w[i], -1) << "var " << v << ": no writer saw " << i << " writes";
      if (i + 1 < w.size()) edges[w[i]].push_back(w[i + 1]);
      if (i < readers_at[v].size()) {
        for (int r : readers_at[v][i]) edges[r].push_back(w[i]);  // readers of i before W_i
      }
      if (i + 1 < readers_at[v].size()) {
        for (int r : readers_at[v][i + 1]) edges[w[i]].push_back(r);
      }
    }
  }
  // Kahn's algorithm: all functions must be ordered.
  std::vector<int> indegree(n, 0);
  for (const auto& out : edges) {
    for (int to : out) indegree[to]++;
  }
  std::vector<int> ready;
  for (int i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  int ordered = 0;
  while (!ready.empty()) {
    int id = ready.back();
    ready.pop_back();
    ++ordered;
    for (int to : edges[id]) {
      if (--indegree[to] == 0) ready.push_back(to);
    }
  }
  EXPECT_EQ(ordered, n) << "no sequential order of the pushes explains the observed orders";

  if (param.pushers == 1) {
    // One pusher: the sequential order is the push order, exactly.
    std::vector<int> writes_so_far(kNumVars, 0);
    for (int i = 0; i < kOpsPerThread; ++i) {
      for (auto [v, before] : observed[0][i].seen) {
        ASSERT_EQ(before, writes_so_far[v]) << "function " << i << " on var " << v;
      }
      for (auto [v, before] : observed[0][i].seen) {
        const auto& w = plans[0][i].writes;
        if (std::find(w.begin(), w.end(), v) != w.end()) writes_so_far[v]++;
      }
    }
  }
  for (auto& h : handles) ASSERT_THAT(engine->DeleteVariable(nullptr, Context::CPU(), h), IsOk());
  ASSERT_THAT(engine->WaitForAll(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(
    Engines, EngineOracleTest,
    ::testing::Values(OracleCase{EngineOptions::Kind::kNaive, 1, 1},
                      OracleCase{EngineOptions::Kind::kNaive, 1, 2},
                      OracleCase{EngineOptions::Kind::kThreaded, 1, 1},
                      OracleCase{EngineOptions::Kind::kThreaded, 2, 1},
                      OracleCase{EngineOptions::Kind::kThreaded, 1, 2},
                      OracleCase{EngineOptions::Kind::kThreaded, 2, 2},
                      OracleCase{EngineOptions::Kind::kThreaded, 4, 2}),
    CaseName);

}  // namespace
}  // namespace tessera::engine

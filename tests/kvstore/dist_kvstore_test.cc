// dist_sync and dist_async end to end inside one process: real parameter servers
// (server/parameter_server.h) on loopback ports or Unix sockets (then sharing keys through
// memory), each "worker" its own DistKVStore with its own gRPC streams. The multi-process versions
// (real tessera-ps daemons) are in tests/integration/.
#include "kvstore/dist_kvstore.h"
#include "kvstore/key_slices.h"

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <barrier>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <latch>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/kvstore_metrics.h"
#include "prometheus/registry.h"
#include "server/parameter_server.h"
#include "tests/ndarray/test_util.h"

namespace tessera::kvstore {
namespace {

using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class DistKVStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    owned_ = tessera::testing::MakeRuntime(tessera::testing::EngineKind::kThreaded);
  }
  void TearDown() override {
    workers_.clear();
    servers_.clear();
    if (!socket_dir_.empty()) std::filesystem::remove_all(socket_dir_);
    socket_dir_.clear();
    metrics_.clear();
    registries_.clear();
    server_options_.clear();
  }

  enum class Transport { kLoopback, kUnixSockets };
  // Starts `num_servers` servers for `num_workers` workers and connects the workers. On Unix
  // sockets the servers share parts of at least 16 bytes through memory.
  void StartCluster(const std::string& type, int num_servers, int num_workers,
                    int64_t bigarray_bound = kDefaultBigArrayBound,
                    Transport transport = Transport::kLoopback, bool replicated = false) {
    ClusterSpec spec;
    if (transport == Transport::kUnixSockets && socket_dir_.empty()) {
      char dir[] = "/tmp/dist-kvstore-test-XXXXXX";  // short: a socket path has 107 bytes
      ASSERT_NE(mkdtemp(dir), nullptr);
      socket_dir_ = dir;
    }
    for (int s = 0; s < num_servers; ++s) {
      ServerStoreOptions options;
      options.server_index = s;
      options.num_servers = num_servers;
      options.num_workers = num_workers;
      options.shared_memory_min_bytes = 16;
      options.metrics = &metrics_.emplace_back(NewServerMetrics(registries_.emplace_back()));
      // Replicas (a value and its optimizer slot) then travel in many chunks.
      if (replicated) options.max_chunk_bytes = 256;
      const std::string address =
          transport == Transport::kUnixSockets
              ? absl::StrCat("unix:", socket_dir_, "/ps-", servers_.size(), ".sock")
              : "127.0.0.1:0";
      // A backup's address must be known before it serves: its socket's name is.
      const std::string backup =
          replicated ? absl::StrCat("unix:", socket_dir_, "/ps-", (s + 1) % num_servers, ".sock")
                     : "";
      std::vector<std::string> peers;
      for (int p = 0; replicated && p < num_servers; ++p) {
        peers.push_back(absl::StrCat("unix:", socket_dir_, "/ps-", p, ".sock"));
      }
      server_options_.push_back(options);
      auto ps = server::ParameterServer::Start(address, options, {}, backup, peers);
      ASSERT_THAT(ps, IsOk());
      spec.servers.push_back((*ps)->address());
      servers_.push_back(std::move(*ps));
    }
    spec.workers.assign(num_workers, "");
    std::vector<std::thread> threads;
    workers_.resize(num_workers);
    // dist_sync connections need no order; connect concurrently as real workers would.
    for (int w = 0; w < num_workers; ++w) {
      threads.emplace_back([&, w, spec]() mutable {
        DistKVStoreOptions options;
        options.cluster = spec;
        options.cluster.index = w;
        options.job_id = "dist-kvstore-test";  // commands must carry it
        options.bigarray_bound = bigarray_bound;
        options.compression = compression_;
        options.connect_timeout = absl::Seconds(10);
        options.failover_timeout = absl::Seconds(30);
        auto store = CreateDistKVStore(type, options);
        ASSERT_THAT(store, IsOk());
        workers_[w] = std::move(*store);
      });
    }
    for (auto& t : threads) t.join();
  }

  const Runtime& rt() const { return owned_->get(); }
  NDArray Arr(std::vector<float> v, int device = 0) {
    return *FromVector<float>(rt(), Shape{static_cast<int64_t>(v.size())}, v, Context::CPU(device));
  }
  static std::vector<float> Get(const NDArray& a) { return *a.AsVector<float>(); }
  std::vector<float> PullValue(int worker, int key, int n) {
    NDArray out = Arr(std::vector<float>(n, -99.f));
    EXPECT_THAT(workers_[worker]->Pull({key}, {{out}}), IsOk());
    EXPECT_THAT(out.WaitToRead(), IsOk());
    return Get(out);
  }

  // How many mappings of key `key`'s shared memory this process holds (/proc/self/maps).
  static int SharedMappings(int key) {
    std::ifstream maps("/proc/self/maps");
    const std::string name = absl::StrCat("memfd:tessera-key-", key, " ");
    int count = 0;
    for (std::string line; std::getline(maps, line);) count += line.find(name) != std::string::npos;
    return count;
  }

  std::unique_ptr<OwnedRuntime> owned_;
  std::deque<prometheus::Registry> registries_;  // per server, in order
  std::deque<ServerMetrics> metrics_;
  std::vector<std::unique_ptr<server::ParameterServer>> servers_;
  std::vector<ServerStoreOptions> server_options_;  // as started
  std::vector<std::unique_ptr<KVStore>> workers_;
  std::string socket_dir_;
  GradientCompression compression_;  // the workers' (set before StartCluster)

  // Workers push and pull random keys in random ways; every value must be its round's sum.
  void RunRoundOracle(Transport transport);
  // The failover tests' job: three workers, two replicated servers on Unix sockets, keys 0
  // (server 0's), 1 (server 1's) and 2 (split across both), SGD with momentum on the servers.
  static constexpr int kFailoverWorkers = 3;
  inline static const std::vector<int> kFailoverKeys = {0, 1, 2};
  inline static const std::vector<int> kFailoverSizes = {5, 7, 100};
  void StartFailoverJob();
  // Worker `w`'s round `round` of that job: its push_pull of every key, waited for; the
  // values it got appended to `last` (null: not kept).
  void FailoverRound(int w, int round, std::vector<float>* last);
  // That job for eight rounds; with `kill`, server 0 is shut down while round 4 is open on
  // it (two workers' pushes taken, the third held back until then). The values the workers
  // hold after the last round (the same on every worker).
  std::vector<float> TrainThroughAFailover(bool kill);
  // The same job for `rounds` rounds, with `before[r]` run while every worker waits before
  // round r. The values
  // after the last round.
  std::vector<float> TrainWithFaultsBetweenRounds(int rounds,
                                                  std::map<int, std::function<void()>> before);
  // The same job with `faults` run on this thread while the workers train: `faults` lets
  // them run `n` more rounds with advance(n), which returns once worker 0 finished them, and
  // so keeps rounds going during its faults (the rest run after it).
  std::vector<float> TrainWithFaultsDuringRounds(
      int rounds, const std::function<void(const std::function<void(int)>& advance)>& faults);
  // Starts server `s` again, afresh, where it served (a supervisor's restart).
  void RestartServer(int s) {
    const std::string address = absl::StrCat("unix:", socket_dir_, "/ps-", s, ".sock");
    const int n = static_cast<int>(servers_.size());
    std::vector<std::string> peers;
    for (int p = 0; p < n; ++p) peers.push_back(absl::StrCat("unix:", socket_dir_, "/ps-", p, ".sock"));
    servers_[s].reset();
    auto ps = server::ParameterServer::Start(
        address, server_options_[s], {},
        absl::StrCat("unix:", socket_dir_, "/ps-", (s + 1) % n, ".sock"), peers);
    ASSERT_THAT(ps, IsOk());
    servers_[s] = std::move(*ps);
  }
};

TEST_F(DistKVStoreTest, SyncRoundSumsEveryWorkersPushBeforeAnyPullSeesIt) {
  StartCluster("dist_sync", 1, 2);
  ASSERT_EQ(workers_.size(), 2u);
  EXPECT_EQ(workers_[1]->rank(), 1);
  EXPECT_EQ(workers_[1]->num_workers(), 2);
  EXPECT_EQ(workers_[0]->type(), "dist_sync");
  for (auto& w : workers_) ASSERT_THAT(w->Init({3}, {Arr({1, 2, 3})}), IsOk());
  EXPECT_THAT(PullValue(1, 3, 3), ElementsAre(1, 2, 3));
  for (int round = 1; round <= 3; ++round) {
    // Worker 0 pushes and pulls first: its pull must wait for worker 1's push.
    NDArray out0 = Arr({0, 0, 0});
    ASSERT_THAT(workers_[0]->Push({3}, {{Arr({1.f * round, 0, 0})}}), IsOk());
    ASSERT_THAT(workers_[0]->Pull({3}, {{out0}}), IsOk());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_THAT(workers_[1]->Push({3}, {{Arr({0, 10.f * round, 0})}}), IsOk());
    ASSERT_THAT(out0.WaitToRead(), IsOk());
    // No optimizer: the value is the round's sum.
    EXPECT_THAT(Get(out0), ElementsAre(round, 10 * round, 0)) << "round " << round;
    EXPECT_THAT(PullValue(1, 3, 3), ElementsAre(round, 10 * round, 0));
  }
}

TEST_F(DistKVStoreTest, SyncRunsTheServersOptimizerOncePerRound) {
  StartCluster("dist_sync", 1, 2);
  for (auto& w : workers_) {
    ASSERT_THAT(w->Init({0}, {Arr({1, 1})}), IsOk());
    ASSERT_THAT(w->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "0.5"}})), IsOk());
    EXPECT_EQ(w->optimizer()->name(), "sgd");
  }
  ASSERT_THAT(workers_[0]->Push({0}, {{Arr({1, 2})}}), IsOk());
  ASSERT_THAT(workers_[1]->Push({0}, {{Arr({3, 4})}}), IsOk());
  // w - 0.5 * (g0 + g1)
  EXPECT_THAT(PullValue(0, 0, 2), ElementsAre(1 - 2, 1 - 3));
  EXPECT_THAT(PullValue(1, 0, 2), ElementsAre(1 - 2, 1 - 3));
  // The servers' optimizer state travels through the command channel.
  auto state = workers_[0]->SaveOptimizerStates();
  ASSERT_THAT(state, IsOk());
  EXPECT_THAT(workers_[1]->LoadOptimizerStates(rt(), *state), IsOk());
  EXPECT_THAT(workers_[1]->LoadOptimizerStates(rt(), "junk"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TSRPSOPT")));
}

TEST_F(DistKVStoreTest, TheLearningRateScheduleRunsOnTheServers) {
  StartCluster("dist_sync", 1, 1);
  ASSERT_THAT(workers_[0]->Init({0}, {Arr({0})}), IsOk());
  auto sgd = *Optimizer::Create("sgd", {{"learning_rate", "1"}});
  sgd->SetLrScheduler(*FactorScheduler::Create(/*step=*/1, /*factor=*/0.5, 1e-8, /*base_lr=*/1));
  ASSERT_THAT(workers_[0]->SetOptimizer(std::move(sgd)), IsOk());
  // lr 1, then 0.5, then 0.25: the server's optimizer counts its updates.
  const float expect[] = {-1, -1.5, -1.75};
  for (float e : expect) {
    ASSERT_THAT(workers_[0]->Push({0}, {{Arr({1})}}), IsOk());
    EXPECT_THAT(PullValue(0, 0, 1), ElementsAre(e));
  }
}

TEST_F(DistKVStoreTest, AsyncAppliesEachPushOnArrival) {
  StartCluster("dist_async", 1, 2);
  for (auto& w : workers_) {
    ASSERT_THAT(w->Init({5}, {Arr({0, 0})}), IsOk());
    ASSERT_THAT(w->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "1"}})), IsOk());
  }
  ASSERT_THAT(workers_[0]->Push({5}, {{Arr({1, 0})}}), IsOk());
  // No round: worker 0 sees its own update without waiting for worker 1.
  EXPECT_THAT(PullValue(0, 5, 2), ElementsAre(-1, 0));
  ASSERT_THAT(workers_[1]->Push({5}, {{Arr({0, 2})}}), IsOk());
  EXPECT_THAT(PullValue(1, 5, 2), ElementsAre(-1, -2));
}

TEST_F(DistKVStoreTest, BigArraysAreSplitAcrossServersAndSmallOnesSpread) {
  StartCluster("dist_sync", 2, 1, /*bigarray_bound=*/100);
  std::vector<float> big(1001), small = {5, 6, 7};
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  ASSERT_THAT(workers_[0]->Init({0, 1, 2}, {Arr(big), Arr(small), Arr(small)}), IsOk());
  EXPECT_THAT(PullValue(0, 0, 1001), ElementsAreArray(big));
  std::vector<float> grad(1001, 1.f);
  ASSERT_THAT(workers_[0]->Push({0, 1}, {{Arr(grad)}, {Arr({1, 1, 1})}}), IsOk());
  std::vector<float> expect = grad;  // no optimizer: the pushed sum replaces the value
  EXPECT_THAT(PullValue(0, 0, 1001), ElementsAreArray(expect));
  EXPECT_THAT(PullValue(0, 1, 3), ElementsAre(1, 1, 1));
  EXPECT_THAT(PullValue(0, 2, 3), ElementsAre(5, 6, 7));
  // 1,001 elements over a bound of 100 and 2 servers: 12 slices of 83-84, six on each server
  // as 0, 0 + kSliceKeyStride, ..., each through one round; the small keys whole.
  absl::StatusOr<std::vector<KeyCounters>> counters = workers_[0]->RoundCounters();
  ASSERT_THAT(counters.status(), IsOk());
  std::map<int, std::vector<int>> slices;  // server index -> its server keys of key 0
  for (const KeyCounters& c : *counters) {
    if (DeclaredKey(c.key()) != 0) continue;
    slices[c.server_index()].push_back(c.key());
    EXPECT_EQ(c.version(), 1u) << c.key();
  }
  const std::vector<int> expected = {0,
                                     kSliceKeyStride,
                                     2 * kSliceKeyStride,
                                     3 * kSliceKeyStride,
                                     4 * kSliceKeyStride,
                                     5 * kSliceKeyStride};
  EXPECT_THAT(slices[0], ::testing::UnorderedElementsAreArray(expected));
  EXPECT_THAT(slices[1], ::testing::UnorderedElementsAreArray(expected));
  // Each server holds part of the big key: stopping one loses the key.
  servers_[1]->Shutdown();
  NDArray out = Arr(std::vector<float>(1001));
  ASSERT_THAT(workers_[0]->Pull({0}, {{out}}), IsOk());
  EXPECT_THAT(out.WaitToRead(), StatusIs(absl::StatusCode::kUnavailable));
  // After a lost server every call fails at once instead of hanging.
  EXPECT_THAT(workers_[0]->Push({2}, {{Arr(small)}}), StatusIs(absl::StatusCode::kUnavailable));
}

// Small keys go where the fewest bytes are, largest first: 100 and 10 elements on one server,
// 60 and 50 on the other (key % 2 would put 150 on one and 70 on the other).
TEST_F(DistKVStoreTest, SmallKeysArePlacedByBytesNotByNumber) {
  StartCluster("dist_sync", 2, 1);
  std::vector<NDArray> values;
  for (int n : {100, 60, 50, 10}) values.push_back(Arr(std::vector<float>(n, 1.f)));
  ASSERT_THAT(workers_[0]->Init({0, 1, 2, 3}, values), IsOk());
  absl::StatusOr<std::vector<KeyCounters>> counters = workers_[0]->RoundCounters();
  ASSERT_THAT(counters.status(), IsOk());
  std::map<int, int> server_of;
  for (const KeyCounters& c : *counters) server_of[c.key()] = c.server_index();
  ASSERT_EQ(server_of.size(), 4u);
  EXPECT_EQ(server_of[0], server_of[3]);
  EXPECT_EQ(server_of[1], server_of[2]);
  EXPECT_NE(server_of[0], server_of[1]);
  // Every worker's pushes and pulls find them there.
  ASSERT_THAT(workers_[0]->Push({0, 1, 2, 3}, {{values[0]}, {values[1]}, {values[2]}, {values[3]}}),
              IsOk());
  EXPECT_THAT(PullValue(0, 2, 50), ::testing::Each(1.f));
}

// Two servers over gRPC, each the other's backup: after every round each backup holds its
// primary's parts bit for bit (a big key's four slices, two on each server, and small keys
// wherever they live), with every worker's push counted.
TEST_F(DistKVStoreTest, ReplicatedServersKeepTheirBackupsCopyOfEveryRound) {
  constexpr int kRounds = 4;
  StartCluster("dist_sync", 2, 2, /*bigarray_bound=*/100, Transport::kUnixSockets,
               /*replicated=*/true);
  ASSERT_THAT(workers_[0]->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "0.5"},
                                                                   {"momentum", "0.9"}})),
              IsOk());
  std::vector<float> big(301);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f;
  for (auto& w : workers_) {
    ASSERT_THAT(w->Init({0, 1, 2}, {Arr(big), Arr({1, 2, 3}), Arr({4, 5})}), IsOk());
  }
  // The key's parts as both backups hold them, in the key's order: slice j is on server
  // j % 2 as key + (j / 2) * kSliceKeyStride.
  auto backed_up = [&](int key) {
    std::vector<float> whole;
    std::vector<uint64_t> taken;
    for (int server_key : {key, key + kSliceKeyStride}) {
      for (int primary = 0; primary < 2; ++primary) {
        absl::StatusOr<ReplicaStore::Copy> part =
            servers_[(primary + 1) % 2]->store().BackupCopy(server_key);
        if (!part.ok()) continue;
        const size_t at = whole.size();
        whole.resize(at + part->value.size() / sizeof(float));
        std::memcpy(whole.data() + at, part->value.data(), part->value.size());
        taken.insert(taken.end(), part->taken.begin(), part->taken.end());
      }
    }
    return std::make_pair(whole, taken);
  };
  for (int round = 1; round <= kRounds; ++round) {
    for (int w = 0; w < 2; ++w) {
      std::vector<float> g(301);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i * (w + 3) + round) % 7);
      ASSERT_THAT(workers_[w]->Push({0, 1, 2}, {{Arr(g)}, {Arr({1, -1, 2})}, {Arr({0.5f, w})}}),
                  IsOk());
    }
    for (auto [key, n] : std::vector<std::pair<int, int>>{{0, 301}, {1, 3}, {2, 2}}) {
      const std::vector<float> pulled = PullValue(round % 2, key, n);
      const auto [copy, taken] = backed_up(key);
      EXPECT_EQ(copy, pulled) << "key " << key << " after round " << round;
      // Per part, both workers' pushes so far.
      EXPECT_EQ(taken, std::vector<uint64_t>(key == 0 ? 8 : 2, round)) << "key " << key;
    }
  }
}

void DistKVStoreTest::StartFailoverJob() {
  StartCluster("dist_sync", 2, kFailoverWorkers, /*bigarray_bound=*/64, Transport::kUnixSockets,
               /*replicated=*/true);
  if (HasFatalFailure()) return;
  for (auto& w : workers_) {
    EXPECT_THAT(w->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "0.1"},
                                                            {"momentum", "0.9"}})),
                IsOk());
    std::vector<NDArray> init;
    for (int n : kFailoverSizes) {
      std::vector<float> v(n);
      for (int i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i) - 0.3f;
      init.push_back(Arr(v));
    }
    EXPECT_THAT(w->Init(kFailoverKeys, init), IsOk());
  }
}

void DistKVStoreTest::FailoverRound(int w, int round, std::vector<float>* last) {
  std::vector<std::vector<NDArray>> grads, outs;
  for (int n : kFailoverSizes) {
    std::vector<float> g(n);
    for (int i = 0; i < n; ++i) {
      g[i] = std::sin(0.37f * static_cast<float>(i + 1) * (w + 1) + 0.11f * round);
    }
    grads.push_back({Arr(g)});
    outs.push_back({Arr(std::vector<float>(n))});
  }
  EXPECT_THAT(workers_[w]->PushPull(kFailoverKeys, grads, outs), IsOk());
  for (auto& out : outs) EXPECT_THAT(out[0].WaitToRead(), IsOk()) << "round " << round;
  if (last == nullptr) return;
  for (auto& out : outs) {
    const std::vector<float> v = Get(out[0]);
    last->insert(last->end(), v.begin(), v.end());
  }
}

std::vector<float> DistKVStoreTest::TrainThroughAFailover(bool kill) {
  constexpr int kRounds = 8, kKillRound = 4;
  StartFailoverJob();
  if (HasFatalFailure()) return {};
  const double pushed_before = metrics_[0].push_bytes.Value();
  std::latch release(1);  // worker 2's round-4 push waits for it
  std::vector<std::vector<float>> last(kFailoverWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kFailoverWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 1; round <= kRounds; ++round) {
        if (kill && w == 2 && round == kKillRound) release.wait();
        FailoverRound(w, round, round == kRounds ? &last[w] : nullptr);
      }
    });
  }
  if (kill) {
    // Server 0 holds key 1 and a slice of key 2 (placed by bytes: key 2's two slices of 50,
    // then key 1 where there is least, then key 0): 7 + 50 floats per push. Once workers 0 and
    // 1 have pushed round 4 (and worker 2 has not), the round is open there: lose the server.
    const double open_round =
        pushed_before + (kFailoverWorkers * (kKillRound - 1) + 2) * 57.0 * 4;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (metrics_[0].push_bytes.Value() < open_round && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(metrics_[0].push_bytes.Value(), open_round);
    servers_[0]->Shutdown();
    release.count_down();
  }
  for (auto& t : threads) t.join();
  if (kill) {
    const ServerStore* taken = servers_[1]->node().taken_over();
    EXPECT_NE(taken, nullptr);
    if (taken != nullptr) EXPECT_EQ(taken->options().view, 1u);
  }
  for (int w = 1; w < kFailoverWorkers; ++w) EXPECT_EQ(last[w], last[0]) << "worker " << w;
  return last[0];
}

// A primary lost while a round is open on it: its backup takes its keys over once a majority
// of the workers ask, the workers send again what it left unanswered (pushes it had taken
// are not applied twice), and the job ends with the values of a run without the fault, bit
// for bit (rank-order sums, the same optimizer state on the backup).
TEST_F(DistKVStoreTest, ALostServersBackupTakesOverMidRoundAndNoUpdateIsLostOrDoubled) {
  const std::vector<float> expected = TrainThroughAFailover(/*kill=*/false);
  ASSERT_EQ(expected.size(), 112u);
  TearDown();
  const std::vector<float> got = TrainThroughAFailover(/*kill=*/true);
  EXPECT_EQ(got, expected);
}

std::vector<float> DistKVStoreTest::TrainWithFaultsBetweenRounds(
    int rounds, std::map<int, std::function<void()>> before) {
  StartFailoverJob();
  if (HasFatalFailure()) return {};
  std::barrier sync(kFailoverWorkers + 1);
  std::vector<std::vector<float>> last(kFailoverWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kFailoverWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 1; round <= rounds; ++round) {
        sync.arrive_and_wait();  // the faults before this round are done
        FailoverRound(w, round, round == rounds ? &last[w] : nullptr);
        sync.arrive_and_wait();  // the round is done everywhere
      }
    });
  }
  for (int round = 1; round <= rounds; ++round) {
    if (auto it = before.find(round); it != before.end()) it->second();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
  }
  for (auto& t : threads) t.join();
  for (int w = 1; w < kFailoverWorkers; ++w) EXPECT_EQ(last[w], last[0]) << "worker " << w;
  return last[0];
}

std::vector<float> DistKVStoreTest::TrainWithFaultsDuringRounds(
    int rounds, const std::function<void(const std::function<void(int)>& advance)>& faults) {
  StartFailoverJob();
  if (HasFatalFailure()) return {};
  std::mutex mu;
  std::condition_variable cv;
  int allowed = 0, done = 0;  // rounds the workers may start; rounds worker 0 finished
  std::vector<std::vector<float>> last(kFailoverWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kFailoverWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 1; round <= rounds; ++round) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return round <= allowed; });
        }
        FailoverRound(w, round, round == rounds ? &last[w] : nullptr);
        if (w == 0) {
          std::lock_guard<std::mutex> lock(mu);
          done = round;
          cv.notify_all();
        }
      }
    });
  }
  faults([&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    allowed = std::min(rounds, allowed + n);
    cv.notify_all();
    const int until = allowed;
    cv.wait(lock, [&] { return done >= until; });
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    allowed = rounds;
    cv.notify_all();
  }
  for (auto& t : threads) t.join();
  for (int w = 1; w < kFailoverWorkers; ++w) EXPECT_EQ(last[w], last[0]) << "worker " << w;
  return last[0];
}

// Whether `condition` holds within 60 s.
static bool Eventually(const std::function<bool()>& condition) {
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// Fault after fault, with no rerun: server 0 is lost (its keys fail over to server 1), comes
// back afresh and is brought up to date - it holds the copy of its own keys, which server 1
// now serves, and of server 1's - and then server 1 is lost too: both indexes fail over to
// server 0. The job ends with the values of a run without faults, bit for bit.
TEST_F(DistKVStoreTest, AServerThatComesBackIsBroughtUpToDateAndTheNextLossFailsOverToo) {
  const std::vector<float> expected = TrainWithFaultsBetweenRounds(9, {});
  ASSERT_EQ(expected.size(), 112u);
  TearDown();
  const std::vector<float> got = TrainWithFaultsBetweenRounds(
      9, {{3, [&] { servers_[0]->Shutdown(); }},
          {5,
           [&] {
             RestartServer(0);
             // Server 1's own keys and the ones it took over are on server 0 again.
             EXPECT_TRUE(Eventually([&] {
               const ServerStore* taken = servers_[1]->node().taken_over(0);
               return servers_[1]->store().backed_up() && taken != nullptr && taken->backed_up();
             }));
             // (Key 1 is index 0's, key 0 index 1's: placed by bytes.)
             EXPECT_THAT(servers_[0]->store().BackupCopy(1, /*index=*/0).status(), IsOk());
             EXPECT_THAT(servers_[0]->store().BackupCopy(0, /*index=*/1).status(), IsOk());
           }},
          {7, [&] { servers_[1]->Shutdown(); }}});
  EXPECT_EQ(got, expected);
  // Server 0 serves both indexes now: its own in view 2, server 1's in view 1.
  const ServerStore* own_again = servers_[0]->node().taken_over(0);
  const ServerStore* other = servers_[0]->node().taken_over(1);
  ASSERT_NE(own_again, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(own_again->options().view, 2u);
  EXPECT_EQ(other->options().view, 1u);
}

// As above, with the rounds going on throughout: server 1 lost (its keys move to server 0),
// back and brought up to date while the workers train, then server 0 lost.
TEST_F(DistKVStoreTest, FaultAfterFaultWhileTheWorkersTrainLosesNothing) {
  constexpr int kRounds = 200;
  const std::vector<float> expected = TrainWithFaultsDuringRounds(kRounds, [](const auto&) {});
  TearDown();
  const std::vector<float> got =
      TrainWithFaultsDuringRounds(kRounds, [&](const std::function<void(int)>& advance) {
        advance(20);
        // Lost while a round is open (its Shutdown ends the streams after 2 s).
        std::thread lose([&] { servers_[1]->Shutdown(); });
        advance(1);
        lose.join();
        advance(20);
        RestartServer(1);
        // Brought up to date with rounds going on (their updates follow the snapshots).
        int rounds = 0;
        auto copies_made = [&] {
          const ServerStore* taken = servers_[0]->node().taken_over(1);
          return servers_[0]->store().backed_up() && taken != nullptr && taken->backed_up();
        };
        // (At most 60 rounds, so that rounds are left for the second loss on a fast machine.)
        while (!copies_made() && rounds < 60) {
          advance(1);
          ++rounds;
        }
        ASSERT_TRUE(Eventually(copies_made));
        advance(20);
        servers_[0]->Shutdown();
      });
  EXPECT_EQ(got, expected);
}

// dist_async: each push applied once across a failover (integer gradients and plain SGD with
// rate 1, so the final value is exactly the initial one less every push).
TEST_F(DistKVStoreTest, AsyncPushesSurviveAFailoverEachAppliedOnce) {
  constexpr int kWorkers = 2, kRounds = 6;
  StartCluster("dist_async", 2, kWorkers, /*bigarray_bound=*/64, Transport::kUnixSockets,
               /*replicated=*/true);
  for (auto& w : workers_) {
    ASSERT_THAT(w->SetOptimizer(*Optimizer::Create("sgd", {{"learning_rate", "1"}})), IsOk());
    ASSERT_THAT(w->Init({0, 1}, {Arr(std::vector<float>(3, 100.f)),
                                 Arr(std::vector<float>(80, 50.f))}),
                IsOk());
  }
  std::latch halfway(kWorkers + 1), resume(1);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 1; round <= kRounds; ++round) {
        if (round == kRounds / 2 + 1) {
          halfway.arrive_and_wait();
          resume.wait();
        }
        NDArray out0 = Arr(std::vector<float>(3)), out1 = Arr(std::vector<float>(80));
        ASSERT_THAT(workers_[w]->PushPull({0, 1},
                                          {{Arr(std::vector<float>(3, w + 1.f))},
                                           {Arr(std::vector<float>(80, round * 1.f))}},
                                          {{out0}, {out1}}),
                    IsOk());
        ASSERT_THAT(out0.WaitToRead(), IsOk());
        ASSERT_THAT(out1.WaitToRead(), IsOk());
      }
    });
  }
  halfway.arrive_and_wait();
  servers_[0]->Shutdown();
  resume.count_down();
  for (auto& t : threads) t.join();  // every push answered: applied
  // Key 0: 100 less (1 + 2) per round; key 1: 50 less 2 * (1 + ... + 6) everywhere.
  EXPECT_THAT(PullValue(0, 0, 3), ElementsAre(100 - 3 * kRounds, 100 - 3 * kRounds,
                                              100 - 3 * kRounds));
  EXPECT_THAT(PullValue(1, 1, 80), ::testing::Each(50 - 2 * 21));
  EXPECT_NE(servers_[1]->node().taken_over(), nullptr);
}

// Without a replica the lost server's keys are lost: the workers' requests fail naming the
// server and why its neighbour could not take over.
TEST_F(DistKVStoreTest, WithoutReplicasALostServerFailsTheJobNamingIt) {
  StartCluster("dist_sync", 2, 1, kDefaultBigArrayBound, Transport::kUnixSockets);
  ASSERT_THAT(workers_[0]->Init({0}, {Arr({1, 2})}), IsOk());
  servers_[0]->Shutdown();
  NDArray out = Arr({0, 0});
  ASSERT_THAT(workers_[0]->PushPull({0}, {{Arr({1, 1})}}, {{out}}), IsOk());
  EXPECT_THAT(out.WaitToRead(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("parameter server 0"), HasSubstr("was lost"),
                             HasSubstr("holds no copy of them"))));
}

// A rerun's workers can reach a server before every worker of the run it replaces has let
// go: their Hello waits (retried on the server's UNAVAILABLE) instead of failing the rerun.
TEST_F(DistKVStoreTest, ANewJobsWorkerWaitsForTheOldJobsToLeave) {
  StartCluster("dist_sync", 1, 1);  // job "dist-kvstore-test" holds the server
  absl::StatusOr<std::unique_ptr<KVStore>> next;
  std::atomic<bool> done{false};
  std::thread rerun([&] {
    DistKVStoreOptions options;
    options.cluster.servers = {servers_[0]->address()};
    options.cluster.workers = {""};
    options.cluster.index = 0;
    options.job_id = "the-rerun";
    options.connect_timeout = absl::Seconds(60);
    next = CreateDistKVStore("dist_sync", options);
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(done.load()) << "the rerun's Hello was taken while the old job held the server";
  workers_.clear();  // the old job's worker leaves
  rerun.join();
  ASSERT_THAT(next.status(), IsOk());
  ASSERT_THAT((*next)->Init({1}, {Arr({2, 3})}), IsOk());
}

TEST_F(DistKVStoreTest, DevicesOfOneWorkerAreSummedBeforeThePush) {
  StartCluster("dist_sync", 1, 1);
  ASSERT_THAT(workers_[0]->Init({4}, {Arr({0, 0})}), IsOk());
  ASSERT_THAT(workers_[0]->Push({4}, {{Arr({1, 2}, 0), Arr({10, 20}, 1), Arr({100, 200}, 2)}}), IsOk());
  NDArray a = Arr({0, 0}, 1), b = Arr({0, 0}, 2);
  ASSERT_THAT(workers_[0]->Pull({4}, {{a, b}}), IsOk());
  EXPECT_THAT(Get(a), ElementsAre(111, 222));
  EXPECT_THAT(Get(b), ElementsAre(111, 222));
}

TEST_F(DistKVStoreTest, BadCallsAreRefusedBeforeAnythingIsSent) {
  StartCluster("dist_sync", 1, 1);
  ASSERT_THAT(workers_[0]->Init({1}, {Arr({1, 2, 3})}), IsOk());
  EXPECT_THAT(workers_[0]->Init({1}, {Arr({1, 2, 3})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 1 initialized twice")));
  EXPECT_THAT(workers_[0]->Init({-3}, {Arr({1})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key -3 is out of the dist stores' range [0, 1048576)")));
  // The numbers from kSliceKeyStride up name big keys' slices on the servers.
  EXPECT_THAT(workers_[0]->Init({kSliceKeyStride}, {Arr({1})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 1048576 is out of")));
  EXPECT_THAT(workers_[0]->Push({1}, {{Arr({1, 2})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key 1"), HasSubstr("(2,)"), HasSubstr("(3,)"))));
  EXPECT_THAT(workers_[0]->Pull({9}, {{Arr({1})}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 9")));
  auto ints = FromVector<int32_t>(rt(), Shape{3}, std::vector<int32_t>{1, 2, 3});
  EXPECT_THAT(workers_[0]->Init({2}, {*ints}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32")));
  workers_[0]->SetUpdater([](int, const NDArray&, const NDArray&) { return absl::OkStatus(); });
  EXPECT_THAT(workers_[0]->Push({1}, {{Arr({1, 2, 3})}}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("custom updater")));
  workers_[0]->SetUpdater(nullptr);
  // Nothing changed.
  EXPECT_THAT(PullValue(0, 1, 3), ElementsAre(1, 2, 3));
}

TEST_F(DistKVStoreTest, AWorkerLeavingFailsTheRoundItBlocksWithItsName) {
  StartCluster("dist_sync", 1, 2);
  for (auto& w : workers_) ASSERT_THAT(w->Init({7}, {Arr({1})}), IsOk());
  NDArray out = Arr({0});
  ASSERT_THAT(workers_[0]->Push({7}, {{Arr({1})}}), IsOk());
  ASSERT_THAT(workers_[0]->Pull({7}, {{out}}), IsOk());
  const auto start = std::chrono::steady_clock::now();
  workers_[1].reset();  // closes its streams mid-round
  EXPECT_THAT(out.WaitToRead(), StatusIs(absl::StatusCode::kUnavailable,
                                         AllOf(HasSubstr("round 1 of key 7"), HasSubstr("worker 1 left"))));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THAT(workers_[0]->Push({7}, {{Arr({1})}}), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(workers_[0]->Barrier(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(DistKVStoreTest, AWorkerInTheBarrierCountsAsPushingZeros) {
  StartCluster("dist_sync", 1, 2);
  for (auto& w : workers_) ASSERT_THAT(w->Init({0}, {Arr({0})}), IsOk());
  // Worker 1 has one batch less: it reaches the epoch's barrier while worker 0 still pushes.
  std::thread early([&] { EXPECT_THAT(workers_[1]->Barrier(), IsOk()); });
  for (int i = 1; i <= 2; ++i) {
    ASSERT_THAT(workers_[0]->Push({0}, {{Arr({static_cast<float>(i)})}}), IsOk());
    EXPECT_THAT(PullValue(0, 0, 1), ElementsAre(i));
  }
  EXPECT_THAT(workers_[0]->Barrier(), IsOk());
  early.join();
  // The next epoch's rounds need both again.
  ASSERT_THAT(workers_[0]->Push({0}, {{Arr({10})}}), IsOk());
  ASSERT_THAT(workers_[1]->Push({0}, {{Arr({20})}}), IsOk());
  EXPECT_THAT(PullValue(0, 0, 1), ElementsAre(30));
  EXPECT_THAT(PullValue(1, 0, 1), ElementsAre(30));
}

// Randomized against an oracle: each worker pushes every key `rounds` times, in its own
// random key order and with random pauses, pulling after each push; in dist_sync the value
// after round r must be the sum of every worker's r-th push of that key (no optimizer).
TEST_F(DistKVStoreTest, PushPullIsOneRequestAnsweredWithTheRoundsValue) {
  StartCluster("dist_sync", 2, 2, /*bigarray_bound=*/4);  // key 1 is split across both
  for (auto& w : workers_)
    ASSERT_THAT(w->Init({0, 1}, {Arr({0, 0}), Arr({0, 0, 0, 0, 0})}), IsOk());
  for (int round = 1; round <= 3; ++round) {
    // Worker 0's answer waits for worker 1's push. Key 0 in place, as a trainer that
    // updates its own weights pulls the summed gradient back into it.
    NDArray grad0 = Arr({1.f * round, 0}), out1 = Arr(std::vector<float>(5, -1));
    ASSERT_THAT(workers_[0]->PushPull({0, 1}, {{grad0}, {Arr({1, 1, 1, 1, 1.f * round})}},
                                      {{grad0}, {out1}}),
                IsOk());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Worker 1 gets key 0's value on two devices (through its host buffer).
    NDArray a = Arr({-1, -1}, 1), b = Arr({-1, -1}, 2), out = Arr(std::vector<float>(5, -1));
    ASSERT_THAT(workers_[1]->PushPull({0, 1}, {{Arr({0, 10.f * round})}, {Arr({2, 2, 2, 2, 2})}},
                                      {{a, b}, {out}}),
                IsOk());
    EXPECT_THAT(Get(grad0), ElementsAre(round, 10 * round)) << "round " << round;
    EXPECT_THAT(Get(a), ElementsAre(round, 10 * round));
    EXPECT_THAT(Get(b), ElementsAre(round, 10 * round));
    EXPECT_THAT(Get(out1), ElementsAre(3, 3, 3, 3, 2 + round));
    EXPECT_THAT(Get(out), ElementsAre(3, 3, 3, 3, 2 + round));
  }
  // A key given twice is pushed once, summed, then pulled into both outputs.
  NDArray x = Arr({0, 0}), y = Arr({0, 0});
  ASSERT_THAT(workers_[1]->Push({0}, {{Arr({5, 5})}}), IsOk());
  ASSERT_THAT(workers_[0]->PushPull({0, 0}, {{Arr({1, 0})}, {Arr({0, 1})}}, {{x}, {y}}), IsOk());
  EXPECT_THAT(Get(x), ElementsAre(6, 6));
  EXPECT_THAT(Get(y), ElementsAre(6, 6));
}

TEST_F(DistKVStoreTest, SameHostServersShareBigPartsThroughMemory) {
  StartCluster("dist_sync", 2, 2, /*bigarray_bound=*/8, Transport::kUnixSockets);
  // Key 0 (8 bytes) travels on the streams; key 1 is split into two 20-byte parts, shared.
  for (auto& w : workers_) {
    ASSERT_THAT(w->Init({0, 1}, {Arr({0, 0}), Arr(std::vector<float>(10, 0))}), IsOk());
  }
  EXPECT_EQ(SharedMappings(0), 0);
  EXPECT_EQ(SharedMappings(1), 2 + 2 * 2);  // each server's region, each worker's two slots
  for (int round = 1; round <= 3; ++round) {
    NDArray grad = Arr(std::vector<float>(10, 1.f * round)), out = Arr(std::vector<float>(10));
    ASSERT_THAT(workers_[0]->PushPull({0, 1}, {{Arr({1, 2})}, {grad}}, {{Arr({0, 0})}, {grad}}),
                IsOk());
    ASSERT_THAT(workers_[1]->Push({0, 1}, {{Arr({1, 2})}, {Arr(std::vector<float>(10, 10))}}),
                IsOk());
    ASSERT_THAT(workers_[1]->Pull({1}, {{out}}), IsOk());
    EXPECT_THAT(Get(grad), ::testing::Each(10 + round)) << "round " << round;
    EXPECT_THAT(Get(out), ::testing::Each(10 + round)) << "round " << round;
  }
  EXPECT_THAT(PullValue(0, 0, 2), ElementsAre(2, 4));  // no optimizer: the last round's sum
}

// Compressed both ways: 2bit pushes, and pulls answered in bfloat16 chunks (256 bytes here:
// 128 values each) that the worker widens into place - the values rounded, whole.
TEST_F(DistKVStoreTest, PullsInBFloat16ArriveRoundedInEveryChunk) {
  compression_.set_type("2bit");
  compression_.set_threshold(0.5f);
  compression_.set_pull_type("bf16");
  StartCluster("dist_sync", 2, 2, kDefaultBigArrayBound, Transport::kUnixSockets, /*replicated=*/true);
  std::vector<float> init(300);
  for (int i = 0; i < 300; ++i) init[i] = 1.0f + static_cast<float>(i) / 7.0f;
  for (auto& w : workers_) ASSERT_THAT(w->Init({3}, {Arr(init)}), IsOk());
  std::vector<float> rounded(300);
  for (int i = 0; i < 300; ++i) rounded[i] = static_cast<float>(BFloat16(init[i]));
  EXPECT_EQ(PullValue(1, 3, 300), rounded);
  EXPECT_NE(rounded, init);
  // The workers' byte counters count what went on the wire, as the servers' do.
  ClientMetrics& client = KVStoreClientMetrics();
  const double pushed = client.push_bytes.Value(), pulled = client.pull_bytes.Value();
  for (auto& w : workers_) ASSERT_THAT(w->Push({3}, {{Arr(std::vector<float>(300, 0.7f))}}), IsOk());
  // Each worker's 0.7 goes as 0.5 (0.2 stays in its residual); no optimizer: the sum is the value.
  EXPECT_THAT(PullValue(0, 3, 300), ::testing::Each(1.0f));
  EXPECT_EQ(client.push_bytes.Value() - pushed, 2 * 76);  // 2-bit: 19 words of 16 values
  EXPECT_EQ(client.pull_bytes.Value() - pulled, 300 * 2);  // bfloat16
}

TEST_F(DistKVStoreTest, RandomInterleavingsMatchTheRoundOracle) {
  for (Transport transport : {Transport::kLoopback, Transport::kUnixSockets}) {
    SCOPED_TRACE(transport == Transport::kLoopback ? "loopback" : "Unix sockets");
    workers_.clear();
    servers_.clear();
    RunRoundOracle(transport);
  }
}

void DistKVStoreTest::RunRoundOracle(Transport transport) {
  constexpr int kWorkers = 3, kKeys = 4, kRounds = 6;
  StartCluster("dist_sync", 2, kWorkers, /*bigarray_bound=*/8, transport);
  auto push_value = [](int w, int key, int round) { return static_cast<float>(100 * w + 10 * key + round); };
  auto oracle = [&](int key, int round) {
    float sum = 0;
    for (int w = 0; w < kWorkers; ++w) sum += push_value(w, key, round);
    return sum;
  };
  const int sizes[kKeys] = {1, 5, 9, 20};  // 9 and 20 are split across both servers
  for (auto& w : workers_) {
    for (int k = 0; k < kKeys; ++k) ASSERT_THAT(w->Init({k}, {Arr(std::vector<float>(sizes[k]))}), IsOk());
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w + 1);
      for (int round = 1; round <= kRounds; ++round) {
        std::vector<int> order = {0, 1, 2, 3};
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<NDArray> outs;
        for (int k : order) {
          NDArray grad = Arr(std::vector<float>(sizes[k], push_value(w, k, round)));
          outs.push_back(Arr(std::vector<float>(sizes[k], -1)));
          if (rng() % 2) {  // one request per key and server
            ASSERT_THAT(workers_[w]->PushPull({k}, {{grad}}, {{outs.back()}}), IsOk());
            continue;
          }
          ASSERT_THAT(workers_[w]->Push({k}, {{grad}}), IsOk());
          if (rng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
          ASSERT_THAT(workers_[w]->Pull({k}, {{outs.back()}}), IsOk());
        }
        for (size_t i = 0; i < order.size(); ++i) {
          for (float v : Get(outs[i])) mismatches += v != oracle(order[i], round);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace tessera::kvstore

// engine_bench: the threaded engine against oneTBB on three dependency shapes.
//
//   independent  1,000,000 empty functions with no variables  | tbb::task_group::run
//   chain        100,000 empty writers of one variable         | flow::graph chain of
//                                                                continue_nodes
//   fanout       1,000 rounds of 64 readers then one writer    | flow::graph, 64 nodes
//                                                                into one per round
// One engine push both declares a dependency and runs the function, so the TBB graphs
// are timed from construction to the end of execution. Each workload runs `--repeats`
// times, ours and oneTBB's alternating; the best time of each counts. Prints a table,
// then one JSON object as the last line.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "engine/create_engine.h"
#include "oneapi/tbb/flow_graph.h"
#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/task_group.h"

namespace tessera::engine {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status Empty(RunContext) { return absl::OkStatus(); }

// engine/internal/spin_lock.h has the same, but that header is the engine's own.
void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// ---- Tessera ----

double EngineIndependent(Engine& e, int n) {
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) Check(e.PushSync(Empty, Context::CPU(), {}, {}));
  Check(e.WaitForAll());
  return SecondsSince(start);
}

double EngineChain(Engine& e, int n) {
  VarHandle v = e.NewVariable();
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) Check(e.PushSync(Empty, Context::CPU(), {}, {v}));
  Check(e.WaitForAll());
  double t = SecondsSince(start);
  Check(e.DeleteVariable(nullptr, Context::CPU(), v));
  Check(e.WaitForAll());
  return t;
}

double EngineFanout(Engine& e, int rounds, int readers) {
  VarHandle v = e.NewVariable();
  auto start = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < readers; ++i) Check(e.PushSync(Empty, Context::CPU(), {v}, {}));
    Check(e.PushSync(Empty, Context::CPU(), {}, {v}));
  }
  Check(e.WaitForAll());
  double t = SecondsSince(start);
  Check(e.DeleteVariable(nullptr, Context::CPU(), v));
  Check(e.WaitForAll());
  return t;
}

// ---- oneTBB ----

double TbbIndependent(int n) {
  auto start = Clock::now();
  tbb::task_group g;
  for (int i = 0; i < n; ++i) g.run([] {});
  g.wait();
  return SecondsSince(start);
}

using ContinueNode = tbb::flow::continue_node<tbb::flow::continue_msg>;

double TbbChain(int n) {
  auto start = Clock::now();
  tbb::flow::graph g;
  std::vector<std::unique_ptr<ContinueNode>> nodes;
  nodes.reserve(n);
  for (int i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<ContinueNode>(g, [](const tbb::flow::continue_msg&) {}));
    if (i > 0) tbb::flow::make_edge(*nodes[i - 1], *nodes[i]);
  }
  nodes[0]->try_put(tbb::flow::continue_msg());
  g.wait_for_all();
  return SecondsSince(start);
}

double TbbFanout(int rounds, int readers) {
  auto start = Clock::now();
  tbb::flow::graph g;
  std::vector<std::unique_ptr<ContinueNode>> nodes;
  nodes.reserve(rounds * (readers + 1) + 1);
  auto body = [](const tbb::flow::continue_msg&) {};
  nodes.push_back(std::make_unique<ContinueNode>(g, body));  // the initial writer
  ContinueNode* writer = nodes.back().get();
  ContinueNode* first = writer;
  for (int r = 0; r < rounds; ++r) {
    nodes.push_back(std::make_unique<ContinueNode>(g, body));
    ContinueNode* next_writer = nodes.back().get();
    for (int i = 0; i < readers; ++i) {
      nodes.push_back(std::make_unique<ContinueNode>(g, body));
      tbb::flow::make_edge(*writer, *nodes.back());
      tbb::flow::make_edge(*nodes.back(), *next_writer);
    }
    writer = next_writer;
  }
  first->try_put(tbb::flow::continue_msg());
  g.wait_for_all();
  return SecondsSince(start);
}

// The time for a cache line to travel from one core to another and back (two threads on
// cores 0 and 1 passing a counter), best of a few rounds. The engine pays such transfers
// between the pushing thread and its workers; a single-threaded peer does not. On these
// VMs it moves between about 55 and 900 ns as the host places the two vCPUs, which is what
// makes the ratios move between runs.
double CoreRoundTripNs() {
  if (std::thread::hardware_concurrency() < 2) return 0;
  constexpr int kTrips = 100000;
  alignas(64) std::atomic<int> turn{0};
  auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  };
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    turn.store(0);
    std::thread echo([&] {
      pin(1);
      for (int i = 0; i < kTrips; ++i) {
        while (turn.load(std::memory_order_acquire) != 2 * i + 1) CpuRelax();
        turn.store(2 * i + 2, std::memory_order_release);
      }
    });
    double ns = 0;
    std::thread serve([&] {
      pin(0);
      auto start = Clock::now();
      for (int i = 0; i < kTrips; ++i) {
        while (turn.load(std::memory_order_acquire) != 2 * i) CpuRelax();
        turn.store(2 * i + 1, std::memory_order_release);
      }
      while (turn.load(std::memory_order_acquire) != 2 * kTrips) CpuRelax();
      ns = SecondsSince(start) * 1e9 / kTrips;
    });
    serve.join();
    echo.join();
    best = std::min(best, ns);
  }
  return best;
}

// Best seconds of `ours` and of `peer` over `repeats` rounds, the two alternating, so that
// both sample the same phases of a machine whose speed drifts (these VMs vary by up to 3x
// within minutes; timing all of ours first, then all of the peer's, measured the drift).
std::pair<double, double> BestOfAlternating(int repeats, const std::function<double()>& ours,
                                            const std::function<double()>& peer) {
  double best_ours = 1e30, best_peer = 1e30;
  for (int i = 0; i < repeats; ++i) {
    best_ours = std::min(best_ours, ours());
    best_peer = std::min(best_peer, peer());
  }
  return {best_ours, best_peer};
}

}  // namespace
}  // namespace tessera::engine

int main(int argc, char** argv) {
  using namespace tessera::engine;
  tessera::InitLogging();
  int repeats = 5;
  int scale_percent = 100;  // --scale=10 runs a tenth of the work (smoke test)
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--repeats=", 0) == 0 && absl::SimpleAtoi(arg.substr(10), &repeats)) continue;
    if (arg.rfind("--scale=", 0) == 0 && absl::SimpleAtoi(arg.substr(8), &scale_percent)) continue;
    std::fprintf(stderr, "usage: engine_bench [--repeats=N] [--scale=PERCENT]\n");
    return 2;
  }
  const int kIndependent = 1000000 * scale_percent / 100;
  const int kChain = 100000 * scale_percent / 100;
  const int kRounds = 1000 * scale_percent / 100, kReaders = 64;

  auto options = EngineOptions::FromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", options.status().ToString().c_str());
    return 2;
  }
  options->kind = EngineOptions::Kind::kThreaded;
  auto engine = CreateEngine(*options);
  if (!engine.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;

  struct Row {
    const char* name;
    double ours_ns, tbb_ns, round_trip_ns;
  };
  std::vector<Row> rows;
  auto add = [&](const char* name, int ops, const std::function<double()>& ours,
                 const std::function<double()>& peer) {
    const double round_trip_ns = CoreRoundTripNs();
    auto [ours_s, peer_s] = BestOfAlternating(repeats, ours, peer);
    rows.push_back({name, ours_s * 1e9 / ops, peer_s * 1e9 / ops, round_trip_ns});
  };
  add("independent", kIndependent, [&] { return EngineIndependent(e, kIndependent); },
      [&] { return TbbIndependent(kIndependent); });
  add("chain", kChain, [&] { return EngineChain(e, kChain); }, [&] { return TbbChain(kChain); });
  add("fanout", kRounds * (kReaders + 1), [&] { return EngineFanout(e, kRounds, kReaders); },
      [&] { return TbbFanout(kRounds, kReaders); });

  std::printf("%-12s %14s %14s %10s %18s\n", "workload", "tessera ns/op", "oneTBB ns/op", "ratio",
              "core round trip ns");
  std::string json = "{";
  for (const Row& r : rows) {
    std::printf("%-12s %14.1f %14.1f %10.2f %18.0f\n", r.name, r.ours_ns, r.tbb_ns,
                r.ours_ns / r.tbb_ns, r.round_trip_ns);
    json += absl::StrFormat(
        R"("%s_ns_per_op": %.1f, "tbb_%s_ns_per_op": %.1f, "%s_ratio_vs_tbb": %.3f, )"
        R"("%s_core_round_trip_ns": %.0f, )",
        r.name, r.ours_ns, r.name, r.tbb_ns, r.name, r.ours_ns / r.tbb_ns, r.name,
        r.round_trip_ns);
  }
  json += absl::StrFormat(R"("repeats": %d, "scale_percent": %d, "cpu_workers": %d})", repeats,
                          scale_percent, options->cpu_workers);
  std::printf("%s\n", json.c_str());
  return 0;
}

// replication_bench: what replicated parameter servers cost. The same training-shaped traffic
// runs with each server's key parts also on its backup (`tessera-ps --backup`, the default with
// two or more servers) and without (`--replicas=1`), in the same run, alternating, so the
// machine's state weighs on both alike. The peer is Tessera without replication.
//
// Cluster: --servers (2) `tessera-ps` processes on Unix sockets in a temporary folder, each the
// next one's backup; --workers (4) worker threads of this process, each with its own runtime
// and DistKVStore (as `tessera launch` runs them on one machine). Keys: the parameter shapes of
// a small CNN (one 2.4 M, 1 M, 590 k, 295 k, 65 k, 25 k and two small float32 arrays: 17.6 MB
// pushed per worker and step), split and spread by the store's own placement; the servers run
// SGD with momentum (update_on_kvstore), so the backup also receives each key's optimizer slot.
//
// One step of a worker: Push(every key), Pull(every key), wait for the pulls. Per mode
// (dist_sync, dist_async) and trial (--trials, 3), a cluster with replication and one without
// each run --warmup steps, then --steps timed steps; steps_per_s is every worker's steps over
// the wall time. Reported: each configuration's median over the trials, and
// slowdown = 1 - replicated / unreplicated (goal: at most 0.05).
//
// Failover (--kills, 6 per mode; 0: none): on a replicated cluster whose workers push_pull
// without pause, a server is SIGKILLed (the servers in turn) and started again 0.2 s later, as
// `tessera train`'s supervisor does; the next kill comes 1 s after the survivors say the
// restarted server holds its copies again. A kill's stall is the longest gap between two
// consecutive steps of worker 0 from the kill to the next, less the median step before the
// first kill: the time the job stood still. Reported: p50 and p99 (with few kills,
// the largest) and the kills. Worker kills need worker processes, which this bench's threads
// are not: `./tessera chaos ... --kill worker --no-rollback` measures their stall.
// Last line: one JSON object naming the machine.
#include <malloc.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/machine.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "core/subprocess.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string ps_binary = "bazel-bin/server/tessera-ps";
  int servers = 2;
  int workers = 4;
  int trials = 3;
  int warmup = 3;
  int steps = 30;
  int kills = 6;
};

// A small CNN's parameter sizes, in floats.
const std::vector<int64_t> kKeySizes = {2359296, 1048576, 589824, 294912, 65536, 25088, 512, 10};

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "replication_bench: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// `servers` tessera-ps processes on sockets in a fresh folder; each backs up on the next one
// when `replicated`.
class Cluster {
 public:
  Cluster(const Flags& flags, int num_workers, bool replicated) {
    char dir[] = "/tmp/replication-bench-XXXXXX";  // short: a socket path has 107 bytes
    if (mkdtemp(dir) == nullptr) Check(absl::InternalError("mkdtemp"), "socket folder");
    dir_ = dir;
    auto socket = [&](int i) { return absl::StrCat("unix:", dir_, "/ps-", i, ".sock"); };
    std::vector<std::string> peers;
    for (int i = 0; i < flags.servers; ++i) peers.push_back(socket(i));
    for (int i = 0; i < flags.servers; ++i) {
      std::vector<std::string> argv = {
          flags.ps_binary, "--address=" + socket(i), absl::StrCat("--index=", i),
          absl::StrCat("--num_servers=", flags.servers),
          absl::StrCat("--num_workers=", num_workers),
          absl::StrCat("--port_file=", dir_, "/ps-", i, ".port")};
      if (replicated) {
        argv.push_back("--backup=" + socket((i + 1) % flags.servers));
        argv.push_back("--peers=" + absl::StrJoin(peers, ","));
      } else {
        argv.push_back("--replicas=1");
      }
      starts_.push_back({.argv = argv,
                         .stdout_path = absl::StrCat(dir_, "/ps-", i, ".log"),
                         .stderr_path = absl::StrCat(dir_, "/ps-", i, ".log")});
      processes_.emplace_back();
      Start(i);
      addresses_.push_back(socket(i));
    }
  }
  // Starts server `i` (again: its log goes on).
  void Start(int i) {
    const std::string port_file = absl::StrCat(dir_, "/ps-", i, ".port");
    std::error_code ec;
    std::filesystem::remove(port_file, ec);
    SubprocessOptions options = starts_[i];
    if (processes_[i] != nullptr) {  // appended to, not truncated
      options.stdout_path = options.stderr_path = absl::StrCat(dir_, "/ps-", i, ".log.", ++restarts_);
    }
    absl::StatusOr<std::unique_ptr<Subprocess>> ps = Subprocess::Start(options);
    Check(ps.status(), "starting tessera-ps");
    processes_[i] = *std::move(ps);
    Check(WaitForFile(port_file, absl::Seconds(20)).status(), "tessera-ps serving");
  }
  void Kill(int i) {
    (void)processes_[i]->Signal(SIGKILL);
    (void)processes_[i]->Wait(absl::Seconds(10));
  }
  // How often the servers' logs (restarted ones' too) say a backup holds every key again.
  int Resyncs() const {
    int count = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      if (entry.path().string().find(".log") == std::string::npos) continue;
      const std::string log = ReadFileToString(entry.path().string()).value_or("");
      for (size_t at = log.find("holds every key again"); at != std::string::npos;
           at = log.find("holds every key again", at + 1)) {
        ++count;
      }
    }
    return count;
  }
  ~Cluster() {
    for (auto& p : processes_) {
      (void)p->Signal(SIGTERM);
      (void)p->Wait(absl::Seconds(10));
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::vector<std::string>& addresses() const { return addresses_; }
  std::string Log(int i) const {
    return ReadFileToString(absl::StrCat(dir_, "/ps-", i, ".log")).value_or("");
  }
  // Whether a server's log says replication failed (the figures would then be one copy's).
  bool ReplicationFailed() const {
    for (size_t i = 0; i < processes_.size(); ++i) {
      const std::string log =
          ReadFileToString(absl::StrCat(dir_, "/ps-", i, ".log")).value_or("");
      if (log.find("replication to its backup") != std::string::npos) return true;
    }
    return false;
  }

 private:
  std::string dir_;
  std::vector<SubprocessOptions> starts_;
  std::vector<std::unique_ptr<Subprocess>> processes_;
  std::vector<std::string> addresses_;
  int restarts_ = 0;
};

// One worker thread's store and arrays: every key Init (its gradient as the value) and the
// servers' optimizer set.
struct Worker {
  std::unique_ptr<OwnedRuntime> rt;
  std::unique_ptr<kvstore::KVStore> kv;
  std::vector<int> keys;
  std::vector<std::vector<NDArray>> grads, outs;
};

Worker StartWorker(const Flags& flags, const std::string& mode, const Cluster& cluster, int w,
                   const std::string& job_id) {
  Worker worker;
  auto rt = OwnedRuntime::Create(/*seed=*/w);
  Check(rt.status(), "runtime");
  worker.rt = *std::move(rt);
  kvstore::DistKVStoreOptions options;
  options.cluster.role = kvstore::Role::kWorker;
  options.cluster.index = w;
  options.cluster.servers = cluster.addresses();
  options.cluster.workers.assign(flags.workers, "");
  options.job_id = job_id;
  auto kv = kvstore::CreateDistKVStore(mode, options);
  Check(kv.status(), "CreateDistKVStore");
  worker.kv = *std::move(kv);
  const Runtime& r = worker.rt->get();
  std::vector<NDArray> values;
  for (size_t k = 0; k < kKeySizes.size(); ++k) {
    const int64_t n = kKeySizes[k];
    const std::vector<float> fill(n, 0.001f * static_cast<float>(w + 1));
    auto grad = NDArray::Empty(r, Shape{n});
    auto out = NDArray::Empty(r, Shape{n});
    Check(grad.status(), "alloc");
    Check(out.status(), "alloc");
    Check(grad->SyncCopyFromCPU(fill.data(), n), "copy");
    worker.keys.push_back(static_cast<int>(k));
    values.push_back(*grad);
    worker.grads.push_back({*grad});
    worker.outs.push_back({*out});
  }
  Check(worker.kv->Init(worker.keys, values), "Init");
  auto sgd = kvstore::Optimizer::Create("sgd", {{"learning_rate", "0.01"},
                                                {"momentum", "0.9"},
                                                {"wd", "0.0001"}});
  Check(sgd.status(), "sgd");
  Check(worker.kv->SetOptimizer(std::move(*sgd)), "SetOptimizer");
  return worker;
}

// Steps per second of every worker together, on a fresh cluster.
double Run(const Flags& flags, const std::string& mode, bool replicated) {
  Cluster cluster(flags, flags.workers, replicated);
  std::vector<Clock::time_point> ends(flags.workers);
  Clock::time_point start;
  std::barrier sync(flags.workers, [&]() noexcept { start = Clock::now(); });
  std::vector<std::thread> threads;
  for (int w = 0; w < flags.workers; ++w) {
    threads.emplace_back([&, w] {
      const Worker worker = StartWorker(flags, mode, cluster, w, "replication-bench");
      auto step = [&] {
        Check(worker.kv->Push(worker.keys, worker.grads, 0), "Push");
        Check(worker.kv->Pull(worker.keys, worker.outs, 0), "Pull");
        for (auto& out : worker.outs) Check(out[0].WaitToRead(), "push+pull");
      };
      for (int i = 0; i < flags.warmup; ++i) step();
      Check(worker.kv->Barrier(), "Barrier");
      sync.arrive_and_wait();
      for (int i = 0; i < flags.steps; ++i) step();
      ends[w] = Clock::now();
      Check(worker.kv->Barrier(), "Barrier");
    });
  }
  for (auto& t : threads) t.join();
  if (replicated && cluster.ReplicationFailed()) {
    for (int i = 0; i < flags.servers; ++i) {
      std::fprintf(stderr, "%s\n", cluster.Log(i).c_str());
    }
    Check(absl::InternalError("a server's log says replication failed"), mode.c_str());
  }
  const double seconds =
      std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) - start).count();
  return static_cast<double>(flags.steps) * flags.workers / seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One worker of the failover run: steps until `stop`, recording when each step ended.
void StepUntil(const Flags& flags, const std::string& mode, const Cluster& cluster, int w,
               const std::atomic<bool>& stop, std::vector<Clock::time_point>* ends,
               std::barrier<>& ready) {
  const Worker worker = StartWorker(flags, mode, cluster, w, "failover-bench");
  ready.arrive_and_wait();
  while (!stop.load()) {
    Check(worker.kv->PushPull(worker.keys, worker.grads, worker.outs, 0), "PushPull");
    for (auto& out : worker.outs) Check(out[0].WaitToRead(), "push_pull across a failover");
    if (ends != nullptr) ends->push_back(Clock::now());
  }
  Check(worker.kv->Barrier(), "Barrier");
}

// The stalls (seconds) of --kills server kills on a replicated cluster in `mode`.
std::vector<double> FailoverStalls(const Flags& flags, const std::string& mode) {
  Cluster cluster(flags, flags.workers, /*replicated=*/true);
  std::atomic<bool> stop{false};
  std::vector<Clock::time_point> ends;  // worker 0's
  ends.reserve(1 << 16);
  std::barrier ready(flags.workers + 1);
  std::vector<std::thread> threads;
  for (int w = 0; w < flags.workers; ++w) {
    threads.emplace_back([&, w] {
      StepUntil(flags, mode, cluster, w, stop, w == 0 ? &ends : nullptr, ready);
    });
  }
  ready.arrive_and_wait();
  std::vector<Clock::time_point> kills;
  std::vector<size_t> at;
  for (int k = 0; k < flags.kills; ++k) {
    const int resyncs = cluster.Resyncs();
    absl::SleepFor(absl::Seconds(1));  // steps at the cluster's pace before the kill
    const int victim = k % flags.servers;
    kills.push_back(Clock::now());
    cluster.Kill(victim);
    absl::SleepFor(absl::Milliseconds(200));  // the supervisor's back-off
    cluster.Start(victim);
    // The survivors copy their keys to it again before the next kill.
    for (const absl::Time deadline = absl::Now() + absl::Seconds(120);
         cluster.Resyncs() < resyncs + flags.servers && absl::Now() < deadline;) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    if (cluster.Resyncs() < resyncs + flags.servers) {
      Check(absl::DeadlineExceededError("the restarted server was not brought up to date"),
            mode.c_str());
    }
  }
  absl::SleepFor(absl::Seconds(1));
  stop = true;
  for (auto& t : threads) t.join();
  // The median step before the first kill, and each kill's longest gap after it.
  std::vector<double> before;
  for (size_t i = 1; i < ends.size() && ends[i] < kills.front(); ++i) {
    before.push_back(std::chrono::duration<double>(ends[i] - ends[i - 1]).count());
  }
  const double step = before.empty() ? 0 : Median(before);
  std::vector<double> stalls;
  for (size_t k = 0; k < kills.size(); ++k) {
    const Clock::time_point until = k + 1 < kills.size() ? kills[k + 1] : Clock::time_point::max();
    double longest = 0;
    Clock::time_point last = kills[k];
    for (size_t i = 0; i < ends.size(); ++i) {
      if (ends[i] <= kills[k] || ends[i] > until) continue;
      longest = std::max(longest, std::chrono::duration<double>(ends[i] - last).count());
      last = ends[i];
    }
    stalls.push_back(std::max(0.0, longest - step));
  }
  return stalls;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  // As tessera-ps does: buffers the size of the keys come from the heap, not fresh mappings.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name, int* out) {
      const std::string prefix = absl::StrCat("--", name, "=");
      if (arg.rfind(prefix, 0) != 0) return false;
      if (!absl::SimpleAtoi(arg.substr(prefix.size()), out) || *out < 1) {
        std::fprintf(stderr, "replication_bench: %s needs a positive integer\n", prefix.c_str());
        std::exit(2);
      }
      return true;
    };
    if (arg.rfind("--ps_binary=", 0) == 0) {
      flags.ps_binary = arg.substr(12);
    } else if (arg == "--kills=0") {
      flags.kills = 0;
    } else if (!value("servers", &flags.servers) && !value("workers", &flags.workers) &&
               !value("trials", &flags.trials) && !value("warmup", &flags.warmup) &&
               !value("steps", &flags.steps) && !value("kills", &flags.kills)) {
      std::fprintf(stderr,
                   "usage: replication_bench [--ps_binary=PATH] [--servers=N] [--workers=N] "
                   "[--trials=N] [--warmup=N] [--steps=N] [--kills=N]\n");
      return 2;
    }
  }
  if (flags.servers < 2) {
    std::fprintf(stderr, "replication_bench: replication needs --servers >= 2\n");
    return 2;
  }
  if (!std::filesystem::exists(flags.ps_binary)) {
    std::fprintf(stderr, "replication_bench: %s is missing (bazel build //server:tessera-ps)\n",
                 flags.ps_binary.c_str());
    return 1;
  }
  int64_t floats = 0;
  for (int64_t n : kKeySizes) floats += n;
  nlohmann::json json;
  json["bench"] = "replication_bench";
  json["cpu"] = bench::CpuModel();
  json["isa"] = bench::CpuIsa();
  json["cores"] = std::thread::hardware_concurrency();
  json["servers"] = flags.servers;
  json["workers"] = flags.workers;
  json["bytes_pushed_per_worker_step"] = floats * 4;
  json["peer"] = "the same cluster with --replicas=1, alternating in the same run";
  for (const std::string mode : {"dist_sync", "dist_async"}) {
    std::vector<double> on, off;
    for (int t = 0; t < flags.trials; ++t) {
      off.push_back(Run(flags, mode, /*replicated=*/false));
      on.push_back(Run(flags, mode, /*replicated=*/true));
      std::fprintf(stderr, "%s trial %d: %.2f steps/s replicated, %.2f without\n", mode.c_str(),
                   t + 1, on.back(), off.back());
    }
    const double replicated = Median(on), unreplicated = Median(off);
    json[mode] = {{"replicated_steps_per_s", replicated},
                  {"unreplicated_steps_per_s", unreplicated},
                  {"slowdown", 1.0 - replicated / unreplicated},
                  {"replicated_trials", on},
                  {"unreplicated_trials", off}};
    if (flags.kills > 0) {
      std::vector<double> stalls = FailoverStalls(flags, mode);
      std::vector<double> sorted = stalls;
      std::sort(sorted.begin(), sorted.end());
      const auto quantile = [&](double q) {
        return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
      };
      std::fprintf(stderr, "%s: %zu server kills, stall p50 %.3f s, p99 %.3f s\n", mode.c_str(),
                   stalls.size(), quantile(0.5), quantile(0.99));
      json[mode]["server_kill"] = {{"kills", stalls.size()},
                                   {"stall_p50_s", quantile(0.5)},
                                   {"stall_p99_s", quantile(0.99)},
                                   {"stalls_s", stalls}};
    }
  }
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

// kvstore_bench: push+pull throughput and latency of the dist_sync KVStore over loopback,
// against the raw TCP loopback ceiling measured in the same run by iperf3 (one stream).
//
// Configurations: arrays of 4 KiB, 1 MiB and 64 MiB (one float32 key) x 1-2 workers x 1-2
// servers. Servers are real `tessera-ps` processes (--ps_binary, default
// bazel-bin/server/tessera-ps relative to the current directory, which `./tessera bench` sets
// to the repository root), or in-process ParameterServers with --in_process or when the binary
// is missing. Workers are threads of this process, each with its own OwnedRuntime and its own
// DistKVStore. Key placement is the store's own: with the default big-array bound (1,000,000
// elements) a 64 MiB array (16.8 M elements) is split across both servers, the smaller ones
// live whole on one server.
//
// Many keys: 100 keys of 1 MiB (--many_keys), 2 workers, 1 server, without and with an
// optimizer on the server (SGD with momentum and weight decay, update_on_kvstore). The server
// locks each key on its own, so one key's update overlaps the other keys' pushes and pulls;
// optimizer_cost is the wall time with the optimizer over the time without.
//
// One iteration of a worker: Push(keys, grads), Pull(keys, outs), WaitToRead on every out.
// After --warmup iterations, --iters (scaled down for small arrays) are timed.
//   gbytes_per_s: (push bytes + pull bytes, every key) per worker, summed over the workers,
//                 divided by the wall time of the timed iterations; 1 GB = 1e9 bytes. One
//                 worker moving a 64 MiB array 10 times in 1 s is 2 * 64 MiB * 10 / 1 s =
//                 1.34 GB/s.
//   median_ms:    median over every worker's timed iterations of one push+pull+wait.
// iperf3: `iperf3 -s -1` and `iperf3 -c 127.0.0.1 -t 3 -J` (one stream), the receiver's
// end.sum_received.bits_per_second / 8 / 1e9 in GB/s. Its stream moves bytes one way at a
// time, as one worker does (a pull follows its push).
// Last line: one JSON object; best_64mib_ratio_vs_iperf3 is the best 64 MiB configuration's
// GB/s over iperf3's (null when iperf3 could not run).
#include <malloc.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "core/file.h"
#include "core/subprocess.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/optimizer.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "nlohmann/json.hpp"
#include "server/parameter_server.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string ps_binary = "bazel-bin/server/tessera-ps";
  bool in_process = false;
  std::string iperf3 = "iperf3";
  int iters = 20;  // for 64 MiB; smaller arrays run more (see ItersFor)
  int warmup = 3;
  int iperf3_seconds = 3;
  // Passed to the tessera-ps processes (e.g. glibc.malloc.mmap_threshold=...); "" = inherit.
  std::string server_glibc_tunables;
  // The workers' malloc set as tessera-ps sets its own (see main).
  bool tune_malloc = true;
  int many_keys = 100;
};

struct Config {
  const char* name;
  int64_t bytes;  // of each key
  int workers;
  int servers;
  int keys = 1;
  bool server_optimizer = false;
};

struct Result {
  Config config;
  int iters = 0;
  double gbytes_per_s = 0;
  double median_ms = 0;
};

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "kvstore_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

int ItersFor(const Flags& flags, int64_t bytes) {
  if (bytes >= (int64_t{16} << 20)) return flags.iters;
  if (bytes >= (int64_t{512} << 10)) return flags.iters * 10;
  return flags.iters * 50;
}

// A port nobody listens on now (bound to 0, then released).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("kvstore_bench_", getpid(), "_", name))
      .string();
}

// ---- iperf3: the loopback ceiling ----

// GB/s of one TCP stream over loopback, or the reason it could not be measured.
absl::StatusOr<double> Iperf3GBytesPerSecond(const Flags& flags) {
  const int port = FreePort();
  const std::string server_log = TempPath("iperf3_server.log");
  const std::string client_out = TempPath("iperf3_client.json");
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> server,
                   Subprocess::Start({.argv = {flags.iperf3, "-s", "-1", "-p", absl::StrCat(port)},
                                      .stdout_path = server_log,
                                      .stderr_path = server_log}));
  std::string out;
  for (int attempt = 0; attempt < 20; ++attempt) {  // until the server listens
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!server->running()) break;
    ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> client,
                     Subprocess::Start({.argv = {flags.iperf3, "-c", "127.0.0.1", "-p",
                                                 absl::StrCat(port), "-t",
                                                 absl::StrCat(flags.iperf3_seconds), "-J"},
                                        .stdout_path = client_out,
                                        .stderr_path = client_out + ".err"}));
    ASSIGN_OR_RETURN(ExitStatus status,
                     client->Wait(absl::Seconds(flags.iperf3_seconds + 30)));
    ASSIGN_OR_RETURN(out, ReadFileToString(client_out));
    if (status.exited && status.code == 0) break;
    out.clear();
  }
  (void)server->Wait(absl::Seconds(5));
  std::remove(server_log.c_str());
  std::remove(client_out.c_str());
  std::remove((client_out + ".err").c_str());
  if (out.empty()) return absl::UnavailableError("iperf3 did not complete a run");
  nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("end") || !j["end"].contains("sum_received")) {
    return absl::DataLossError("iperf3 printed no end.sum_received");
  }
  return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8 / 1e9;
}

// ---- servers ----

class Servers {
 public:
  // `num_servers` servers for `num_workers` workers: processes, or in-process ones.
  static absl::StatusOr<Servers> Start(const Flags& flags, int num_servers, int num_workers) {
    Servers s;
    const bool processes = !flags.in_process && std::filesystem::exists(flags.ps_binary);
    for (int i = 0; i < num_servers; ++i) {
      if (!processes) {
        kvstore::ServerStoreOptions options;
        options.server_index = i;
        options.num_servers = num_servers;
        options.num_workers = num_workers;
        ASSIGN_OR_RETURN(auto ps, server::ParameterServer::Start("127.0.0.1:0", options));
        s.addresses_.push_back(ps->address());
        s.in_process_.push_back(std::move(ps));
        continue;
      }
      const std::string port_file = TempPath(absl::StrCat("ps", i, ".port"));
      std::remove(port_file.c_str());
      SubprocessOptions options{
          .argv = {flags.ps_binary, "--address=127.0.0.1:0", absl::StrCat("--index=", i),
                   absl::StrCat("--num_servers=", num_servers),
                   absl::StrCat("--num_workers=", num_workers),
                   absl::StrCat("--port_file=", port_file)},
          .stdout_path = TempPath(absl::StrCat("ps", i, ".log")),
          .stderr_path = TempPath(absl::StrCat("ps", i, ".log"))};
      if (!flags.server_glibc_tunables.empty()) {
        options.env.push_back({"GLIBC_TUNABLES", flags.server_glibc_tunables});
      }
      ASSIGN_OR_RETURN(auto ps, Subprocess::Start(options));
      s.processes_.push_back(std::move(ps));
      ASSIGN_OR_RETURN(std::string port, WaitForFile(port_file, absl::Seconds(20)));
      std::remove(port_file.c_str());
      s.addresses_.push_back(absl::StrCat("127.0.0.1:", port.substr(0, port.size() - 1)));
    }
    return s;
  }

  Servers() = default;
  Servers(Servers&&) = default;
  ~Servers() {
    for (auto& p : processes_) {
      (void)p->Signal(SIGTERM);
      (void)p->Wait(absl::Seconds(5));  // the destructor SIGKILLs one that did not stop
    }
    for (int i = 0; i < static_cast<int>(processes_.size()); ++i) {
      std::remove(TempPath(absl::StrCat("ps", i, ".log")).c_str());
    }
  }

  const std::vector<std::string>& addresses() const { return addresses_; }
  bool processes() const { return !processes_.empty(); }

 private:
  std::vector<std::unique_ptr<Subprocess>> processes_;
  std::vector<std::unique_ptr<server::ParameterServer>> in_process_;
  std::vector<std::string> addresses_;
};

// ---- one configuration ----

Result Run(const Flags& flags, const Config& config) {
  absl::StatusOr<Servers> servers = Servers::Start(flags, config.servers, config.workers);
  Check(servers.status(), "starting the parameter servers");
  const int64_t n = config.bytes / static_cast<int64_t>(sizeof(float));
  const int iters = ItersFor(flags, config.bytes * config.keys);
  std::vector<std::vector<double>> latencies(config.workers);
  std::vector<Clock::time_point> ends(config.workers);
  Clock::time_point start;
  std::barrier sync(config.workers, [&]() noexcept { start = Clock::now(); });
  std::vector<std::thread> threads;
  for (int w = 0; w < config.workers; ++w) {
    threads.emplace_back([&, w] {
      auto rt = OwnedRuntime::Create(/*seed=*/w);
      Check(rt.status(), "runtime");
      kvstore::DistKVStoreOptions options;
      options.cluster.role = kvstore::Role::kWorker;
      options.cluster.index = w;
      options.cluster.servers = servers->addresses();
      options.cluster.workers.assign(config.workers, "");
      options.bigarray_bound = kvstore::kDefaultBigArrayBound;
      auto kv = kvstore::CreateDistKVStore("dist_sync", options);
      Check(kv.status(), "CreateDistKVStore");
      const Runtime& r = (*rt)->get();
      std::vector<float> ones(n, 1.0f);
      std::vector<int> keys;
      std::vector<NDArray> grads;
      std::vector<std::vector<NDArray>> grad_lists, outs;
      for (int k = 0; k < config.keys; ++k) {
        keys.push_back(k);
        auto grad = NDArray::Empty(r, Shape{n});
        auto out = NDArray::Empty(r, Shape{n});
        Check(grad.status(), "alloc");
        Check(out.status(), "alloc");
        Check(grad->SyncCopyFromCPU(ones.data(), n), "copy");
        grads.push_back(*grad);
        grad_lists.push_back({*grad});
        outs.push_back({*out});
      }
      Check((*kv)->Init(keys, grads), "Init");
      if (config.server_optimizer) {
        auto sgd = kvstore::Optimizer::Create(
            "sgd", {{"learning_rate", "0.01"}, {"momentum", "0.9"}, {"wd", "0.0001"}});
        Check(sgd.status(), "sgd");
        Check((*kv)->SetOptimizer(std::move(*sgd)), "SetOptimizer");
      }
      auto step = [&] {
        Check((*kv)->Push(keys, grad_lists, 0), "Push");
        Check((*kv)->Pull(keys, outs, 0), "Pull");
        for (auto& out : outs) Check(out[0].WaitToRead(), "push+pull");
      };
      for (int i = 0; i < flags.warmup; ++i) step();
      Check((*kv)->Barrier(), "Barrier");
      sync.arrive_and_wait();
      latencies[w].reserve(iters);
      for (int i = 0; i < iters; ++i) {
        const Clock::time_point t0 = Clock::now();
        step();
        latencies[w].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      ends[w] = Clock::now();
      // Every worker sums ones into the round: without an optimizer the value pulled is the
      // worker count; with one, every key went through the same updates from the same start.
      auto first = outs.front()[0].AsVector<float>();
      auto last = outs.back()[0].AsVector<float>();
      Check(first.status(), "AsVector");
      Check(last.status(), "AsVector");
      const float expect = config.server_optimizer ? (*first)[0] : config.workers;
      if ((*first)[0] != expect || (*first)[n - 1] != expect || (*last)[n - 1] != expect ||
          (config.server_optimizer && !(expect < 1.0f))) {
        std::fprintf(stderr, "kvstore_bench: pulled %g and %g, expected %g\n", (*first)[0],
                     (*last)[n - 1], expect);
        std::exit(1);
      }
      Check((*kv)->Barrier(), "Barrier");
    });
  }
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Result result;
  result.config = config;
  result.iters = iters;
  result.gbytes_per_s = 2.0 * static_cast<double>(config.bytes) * config.keys * config.workers *
                        iters / seconds / 1e9;
  result.median_ms = all[all.size() / 2];
  return result;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  Flags flags;
  std::vector<std::string> only_sizes;
  int only_workers = 0, only_servers = 0;  // 0: both 1 and 2
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* prefix) -> std::optional<std::string> {
      if (arg.rfind(prefix, 0) != 0) return std::nullopt;
      return arg.substr(std::string(prefix).size());
    };
    if (auto v = value("--ps_binary=")) { flags.ps_binary = *v; continue; }
    if (auto v = value("--iperf3=")) { flags.iperf3 = *v; continue; }
    if (auto v = value("--server_glibc_tunables=")) { flags.server_glibc_tunables = *v; continue; }
    if (auto v = value("--sizes=")) { only_sizes = absl::StrSplit(*v, ','); continue; }
    if (auto v = value("--iters="); v && absl::SimpleAtoi(*v, &flags.iters) && flags.iters > 0) continue;
    if (auto v = value("--warmup="); v && absl::SimpleAtoi(*v, &flags.warmup)) continue;
    if (auto v = value("--iperf3_seconds="); v && absl::SimpleAtoi(*v, &flags.iperf3_seconds)) continue;
    if (auto v = value("--workers="); v && absl::SimpleAtoi(*v, &only_workers)) continue;
    if (auto v = value("--servers="); v && absl::SimpleAtoi(*v, &only_servers)) continue;
    if (auto v = value("--many_keys="); v && absl::SimpleAtoi(*v, &flags.many_keys)) continue;
    if (arg == "--tune_malloc=0") { flags.tune_malloc = false; continue; }
    if (arg == "--in_process") { flags.in_process = true; continue; }
    std::fprintf(stderr,
                 "usage: kvstore_bench [--ps_binary=PATH] [--in_process] [--iters=N] [--warmup=N]\n"
                 "       [--iperf3=PATH] [--iperf3_seconds=N] [--sizes=4KiB,1MiB,64MiB]\n"
                 "       [--tune_malloc=0] [--workers=1|2] [--servers=1|2] [--server_glibc_tunables=TUNABLES]\n"
                 "       [--many_keys=N] (--sizes=many runs only the many-keys case)\n");
    return 2;
  }
  if (flags.tune_malloc) {
    // As tessera-ps does: freed large buffers stay in the heap instead of going back to the
    // kernel (each new one would cost a page fault per 4 KiB). A trainer process does the same.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  // A worker whose server died must not kill the bench with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<double> iperf3 = Iperf3GBytesPerSecond(flags);
  if (iperf3.ok()) {
    std::printf("iperf3 loopback, one stream: %.3f GB/s\n", *iperf3);
  } else {
    std::printf("iperf3 loopback: not measured (%s)\n", iperf3.status().ToString().c_str());
  }
  const bool processes = !flags.in_process && std::filesystem::exists(flags.ps_binary);
  std::printf("servers: %s\n", processes ? absl::StrCat("tessera-ps processes (", flags.ps_binary, ")").c_str()
                                         : "in-process ParameterServers");
  std::printf("%-14s %7s %7s %6s %12s %11s\n", "size", "workers", "servers", "iters", "GB/s",
              "median ms");
  const Config sizes[] = {{"4KiB", 4 << 10, 0, 0}, {"1MiB", 1 << 20, 0, 0}, {"64MiB", 64 << 20, 0, 0}};
  std::vector<Result> results;
  for (const Config& size : sizes) {
    if (!only_sizes.empty() && std::find(only_sizes.begin(), only_sizes.end(), size.name) == only_sizes.end()) continue;
    for (int workers : {1, 2}) {
      for (int servers : {1, 2}) {
        if ((only_workers && workers != only_workers) || (only_servers && servers != only_servers)) continue;
        Result r = Run(flags, Config{size.name, size.bytes, workers, servers});
        std::printf("%-14s %7d %7d %6d %12.3f %11.3f\n", r.config.name, workers, servers, r.iters,
                    r.gbytes_per_s, r.median_ms);
        std::fflush(stdout);
        results.push_back(r);
      }
    }
  }
  std::optional<double> optimizer_cost;
  if (only_sizes.empty() ||
      std::find(only_sizes.begin(), only_sizes.end(), "many") != only_sizes.end()) {
    const std::string name = absl::StrCat(flags.many_keys, "x1MiB");
    double seconds[2] = {0, 0};
    for (bool optimizer : {false, true}) {
      Config config{name.c_str(), 1 << 20, 2, 1, flags.many_keys, optimizer};
      Result r = Run(flags, config);
      std::printf("%-14s %7d %7d %6d %12.3f %11.3f\n",
                  absl::StrCat(name, optimizer ? "+sgd" : "").c_str(), 2, 1, r.iters,
                  r.gbytes_per_s, r.median_ms);
      std::fflush(stdout);
      seconds[optimizer] = 1 / r.gbytes_per_s;  // the same bytes either way
      results.push_back(r);
    }
    optimizer_cost = seconds[1] / seconds[0];
    std::printf("many keys: the server's optimizer costs %.2fx the time without it\n",
                *optimizer_cost);
  }

  nlohmann::json json;
  json["bench"] = "kvstore_bench";
  json["worker_malloc_tuned"] = flags.tune_malloc;
  json["servers_as"] = processes ? "tessera-ps processes" : "in-process";
  json["throughput_definition"] =
      "(push bytes + pull bytes) per worker summed over workers / wall seconds; GB = 1e9 bytes";
  json["iperf3_gbps"] = iperf3.ok() ? nlohmann::json(*iperf3) : nlohmann::json(nullptr);
  json["iperf3_unit"] = "GB/s, one TCP stream, end.sum_received.bits_per_second / 8e9";
  if (!iperf3.ok()) json["iperf3_error"] = iperf3.status().ToString();
  json["results"] = nlohmann::json::array();
  std::optional<double> best64;
  for (const Result& r : results) {
    json["results"].push_back({{"size", r.config.name},
                               {"keys", r.config.keys},
                               {"server_optimizer", r.config.server_optimizer ? "sgd" : "none"},
                               {"workers", r.config.workers},
                               {"servers", r.config.servers},
                               {"iters", r.iters},
                               {"gbytes_per_s", r.gbytes_per_s},
                               {"median_ms", r.median_ms}});
    if (r.config.bytes == (64 << 20) && r.config.keys == 1) {
      best64 = std::max(best64.value_or(0.0), r.gbytes_per_s);
    }
  }
  json["many_keys_optimizer_cost"] =
      optimizer_cost ? nlohmann::json(*optimizer_cost) : nlohmann::json(nullptr);
  json["best_64mib_gbytes_per_s"] = best64 ? nlohmann::json(*best64) : nlohmann::json(nullptr);
  json["best_64mib_ratio_vs_iperf3"] = best64 && iperf3.ok() && *iperf3 > 0
                                           ? nlohmann::json(*best64 / *iperf3)
                                           : nlohmann::json(nullptr);
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

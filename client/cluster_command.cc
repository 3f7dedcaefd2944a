#include "client/cluster_command.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/local_cluster.h"
#include "core/daemon.h"
#include "nlohmann/json.hpp"

namespace tessera::client {
namespace {

// Set once the owner wants the cluster gone; static: the threads that set it outlive main's
// frame while the process exits.
absl::Mutex stop_mu;
bool stop_requested ABSL_GUARDED_BY(stop_mu) = false;

void RequestStop() {
  absl::MutexLock lock(&stop_mu);
  stop_requested = true;
}

int Usage() {
  std::fprintf(stderr,
               "usage: tessera cluster [-n WORKERS] [-s SERVERS] [--replicas 1|2] [--run_dir DIR] "
               "[--max_restarts N]\n"
               "A daemon that dies is started again, at most N times each (default 10; 0: never).\n"
               "--replicas: copies of each server's keys (default 2 with two servers or more).\n");
  return 2;
}

}  // namespace

int ClusterMain(int argc, char** argv) {
  // A standing cluster brings back a daemon that dies, as a StatefulSet would.
  LocalClusterOptions options{
      .run_dir = "runs/local-cluster", .max_restarts = 10, .stop_with_this_process = true};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg != "-n" && arg != "-s" && arg != "--replicas" && arg != "--run_dir" &&
         arg != "--max_restarts") ||
        i + 1 >= argc) {
      return Usage();
    }
    const std::string value = argv[++i];
    if (arg == "--run_dir") {
      options.run_dir = value;
      continue;
    }
    if (arg == "--replicas") {
      if (value != "1" && value != "2") {
        std::fprintf(stderr, "tessera cluster: --replicas: expected 1 or 2, got '%s'\n",
                     value.c_str());
        return 2;
      }
      options.replicas = value == "1" ? 1 : 2;
      continue;
    }
    const int least = arg == "-n" ? 1 : 0;
    int n = 0;
    if (!absl::SimpleAtoi(value, &n) || n < least) {
      std::fprintf(stderr, "tessera cluster: %s: expected a number of %s >= %d, got '%s'\n",
                   arg.c_str(),
                   arg == "-n" ? "workers" : arg == "-s" ? "servers" : "restarts", least,
                   value.c_str());
      return 2;
    }
    (arg == "-n"   ? options.num_workers
     : arg == "-s" ? options.num_servers
                   : options.max_restarts) = n;
  }
  // Blocked before LocalCluster starts threads, so every thread leaves the signals to us.
  OnTerminationSignal([](int) { RequestStop(); });
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "tessera cluster: %s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  const jobs::Cluster& daemons = (*cluster)->cluster();
  const nlohmann::json ready = {{"workers", daemons.workers},
                                {"servers", daemons.servers},
                                {"token_file", (*cluster)->token_file()},
                                {"run_dir", options.run_dir},
                                {"pids", (*cluster)->pids()}};
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  std::thread([] {
    char buffer[256];
    while (read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
    }
    RequestStop();
  }).detach();
  absl::MutexLock lock(&stop_mu);
  while (!stop_mu.AwaitWithTimeout(absl::Condition(&stop_requested), absl::Milliseconds(500))) {
    if (absl::Status alive = (*cluster)->CheckAlive(); !alive.ok()) {
      std::fprintf(stderr, "tessera cluster: %s\n", std::string(alive.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace tessera::client

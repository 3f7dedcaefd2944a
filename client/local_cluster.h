// LocalCluster: parameter servers and worker daemons as child processes of this machine -
// what `tessera train` starts when no cluster is given and `tessera launch -n -s` sizes,
// like MXNet's tools/launch.py for one machine.
//
// The daemons serve Unix sockets ("unix:/tmp/tessera-sockets-XXXXXX/ps-0.sock") in a folder
// only this user may open, removed with the cluster: the same gRPC streams as over loopback
// TCP for less kernel work per byte, which a dist_sync round of a small model feels
// (docs/performance-history.md, "Distributed training overhead").
//
// Each daemon logs to RUN_DIR/logs/{ps,worker}-N.log. The cluster has a token of its own
// (RUN_DIR/logs/cluster.token, readable by its owner only) that every call between its
// processes carries, so other users of the machine cannot drive its daemons. The
// destructor stops every daemon (SIGTERM, then SIGKILL after a grace period), so an error or
// Ctrl-C in the caller tears the cluster down.
//
// Supervision: with max_restarts > 0, a thread of the cluster starts a daemon that died
// again - same arguments, same address - after a back-off (0.2 s, doubling to 5 s while it
// dies again within 10 s of each start; as Kubernetes', reset once it ran longer), up to
// max_restarts times per daemon; the dead one's log is kept as NAME.log.N. A job that lost
// the daemon then resumes from its checkpoint (jobs/recovery.h).
//
// Thread safety: one owner; the supervisor runs on its own thread.
#ifndef TESSERA_CLIENT_LOCAL_CLUSTER_H_
#define TESSERA_CLIENT_LOCAL_CLUSTER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "jobs/job_client.h"
#include "core/subprocess.h"

namespace tessera::client {

struct LocalClusterOptions {
  int num_servers = 1;  // 0: for jobs with kvstore "local"
  int num_workers = 2;
  // Copies of each server's keys: 2 (each server backs up on the next; needs two servers or
  // more) or 1.
  int replicas = 2;
  std::string run_dir;  // logs and port files go under it (created if missing)
  // The workers' --data_root and --run_root: by default the whole file system for reading
  // (the cluster is this user's own, behind its token) and `run_dir` for writing.
  std::string data_root = "/";
  std::string run_root;
  // The daemons; default: next to this program's bazel-bin folder
  // (bazel-bin/server/tessera-ps, bazel-bin/worker/tessera-worker).
  std::string ps_binary;
  std::string worker_binary;
  // Each worker runs on its own share of the CPUs this process may use (taskset), as
  // containers with CPU limits would: its engine and OpenMP threads size themselves from it.
  bool pin_workers = false;
  // Restarts of each daemon that dies; 0: none (the cluster then reports it, CheckAlive).
  int max_restarts = 0;
  // The daemons stop when this process dies, even by SIGKILL (core/daemon.h StopWithParent).
  // Only for a cluster started on a thread that lives as long as the process: the kernel
  // signals them when the starting thread ends.
  bool stop_with_this_process = false;
};

// `cpus` split among `parts` workers: contiguous runs of nearly equal size, or with more
// workers than CPUs, CPU i % size for worker i.
std::vector<std::vector<int>> SplitCpus(const std::vector<int>& cpus, int parts);

class LocalCluster {
 public:
  // Starts every daemon and waits (up to 60 s) for each to report its port; an error names
  // the daemon and points at its log.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();

  // The daemons' addresses, and the token to reach them.
  const jobs::Cluster& cluster() const { return cluster_; }
  // The file holding that token (for `tessera submit --token_file`).
  const std::string& token_file() const { return token_file_; }
  // OK while every daemon runs; otherwise names the first that exited and how.
  absl::Status CheckAlive();
  // The pids, servers first (tests kill one to see the failure path).
  std::vector<int> pids() const;
  // How many times the supervisor started a daemon again, all daemons together.
  int restarts() const;

 private:
  LocalCluster() = default;
  struct Daemon {
    std::string name;  // "ps-0", "worker-1"
    std::string log;
    std::string socket;  // the Unix socket it serves
    SubprocessOptions start;
    std::unique_ptr<Subprocess> process;
    int restarts = 0;
    // Exits in a row within kSteadyRun of their start: what the back-off doubles with.
    int quick_exits = 0;
    absl::Time started = absl::Now();
    absl::Time restart_at = absl::InfiniteFuture();  // when a dead one starts again
  };
  void Supervise(int max_restarts);

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // (mu_)
  std::thread supervisor_;
  std::vector<Daemon> daemons_;  // (mu_ once the supervisor runs)
  std::string socket_dir_;  // the daemons' Unix sockets; removed by the destructor
  jobs::Cluster cluster_;
  std::string token_file_;
};

// bazel-bin/<relative> beside this program (which lives in bazel-bin/client/).
std::string SiblingBinary(const std::string& relative);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_LOCAL_CLUSTER_H_

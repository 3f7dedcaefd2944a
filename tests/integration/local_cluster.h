// LocalCluster: the processes of one multi-process test on loopback - `tessera-ps` daemons
// on free ports and dist_train_worker processes - as dmlc/ps-lite's tests/local.sh starts
// them. Every process writes stdout and stderr to DIR/NAME.log, DIR being a fresh folder
// under TEST_TMPDIR; AllLogs() gathers them for a failed test's output.
//
// Ownership: the cluster owns its Subprocesses; destroying it SIGKILLs (and reaps) every
// process still running, so a failed or timed-out test leaves no daemon behind.
// Thread safety: one test thread uses it.
#ifndef TESSERA_TESTS_INTEGRATION_LOCAL_CLUSTER_H_
#define TESSERA_TESTS_INTEGRATION_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/subprocess.h"

namespace tessera::integration {

// The path of a file of this workspace's runfiles, e.g. "server/tessera-ps".
std::string RunfilePath(const std::string& path);

class LocalCluster {
 public:
  using Env = std::vector<std::pair<std::string, std::string>>;

  // Processes log under TEST_TMPDIR/`name` (created, or emptied of old logs).
  explicit LocalCluster(const std::string& name);

  // Starts `num_servers` daemons for `num_workers` workers, each on a free loopback port
  // (--address=127.0.0.1:0, the bound port read from its --port_file).
  absl::Status StartServers(int num_servers, int num_workers);
  const std::vector<std::string>& servers() const { return servers_; }  // "127.0.0.1:PORT"
  Subprocess& server(int i) { return *processes_[server_at_[i]].process; }

  // Starts worker `rank` of `num_workers` (dist_train_worker `flags`) with the cluster spec in
  // its environment, plus `env`. Its parameters go to params_path(rank); with
  // --hang_after_batches it writes hang_path(rank) when it starts to hang.
  absl::StatusOr<Subprocess*> StartWorker(int rank, int num_workers,
                                          const std::vector<std::string>& flags,
                                          const Env& env = {});
  std::string params_path(int rank) const;
  std::string hang_path(int rank) const;

  // The log of process `name` ("ps0", "worker1"); "" if unreadable.
  std::string Log(const std::string& name) const;
  std::string AllLogs() const;

 private:
  struct Process {
    std::string name;
    std::unique_ptr<Subprocess> process;
  };
  absl::StatusOr<Subprocess*> Start(const std::string& name, std::vector<std::string> argv,
                                    const Env& env);

  std::string dir_;
  std::vector<Process> processes_;
  std::vector<size_t> server_at_;  // index into processes_ of each server
  std::vector<std::string> servers_;
};

}  // namespace tessera::integration

#endif  // TESSERA_TESTS_INTEGRATION_LOCAL_CLUSTER_H_

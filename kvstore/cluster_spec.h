// ClusterSpec: who is who in a distributed job. Each process has a role (worker or parameter
// server) and an index among the processes of its role, and knows the "host:port" of every
// parameter server and how many workers there are (their addresses too, when they listen).
// ResolveClusterSpec builds it from a daemon's flags and the environment, including the
// DMLC_* variables that MXNet's launcher and Kubeflow's MXJob inject.
//
// Sources, highest precedence first (an environment variable set to "" counts as unset):
//
//   field         flag             Tessera variable        DMLC variables
//   role          --role           TESSERA_ROLE            DMLC_ROLE                (unset: worker)
//   index         --index          TESSERA_INDEX           DMLC_WORKER_ID (workers) or
//                                                          DMLC_SERVER_ID (servers), then
//                                                          DMLC_TASK_ID
//   servers       --ps_hosts       TESSERA_PS_HOSTS        DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
//                                                          DMLC_NUM_SERVER (rule below)
//   workers       --worker_hosts   TESSERA_WORKER_HOSTS    -
//   worker count  --num_workers    TESSERA_NUM_WORKERS     DMLC_NUM_WORKER
//   server count  --num_servers    -                       DMLC_NUM_SERVER
//
// Host lists are comma-separated "host:port" entries, in index order; an IPv6 host is written
// in brackets ("[::1]:9000"). Roles are "worker" or "server". Without an address list, the
// worker count gives the size of `workers` (entries empty): workers need not listen yet.
// Likewise a server given only --num_servers gets that many empty `servers` entries: it needs
// the count (keys are split across the servers) but not the others' addresses. A worker
// always needs the addresses.
// When both a list and a count are given they must agree: DMLC_NUM_SERVER must equal the
// length of the server list, and the first worker count given must equal the length of the
// worker list. DMLC_NUM_* come from the launcher that really started the processes, so a
// disagreement means a stale list, better reported now than as a hang at the first barrier.
// Without any index, a process that is the only one of its role has index 0; with more, a
// missing index is an error (two processes silently both being "worker 0" is worse).
//
// The DMLC variables, as set by Kubeflow's MXJob (the training-operator's MXJob controller,
// SetPodEnv, one pod per replica) and by MXNet's tools/launch.py (dmlc-core's tracker, with
// its local, ssh, mpi, yarn and kubernetes launchers):
//   DMLC_ROLE          the replica type in lower case ("scheduler", "server", "worker"; MXJob
//                      tuning jobs also use "tunertracker", "tunerserver", "tuner", rejected
//                      here as unknown roles). "scheduler" is refused with FAILED_PRECONDITION:
//                      Tessera has no scheduler process (workers reach the servers directly),
//                      so an MXJob for Tessera must have no Scheduler replica. (launch.py
//                      always starts one with the job's own command: wrap the command so
//                      the scheduler process does nothing.)
//   DMLC_NUM_WORKER    number of workers (MXJob and every launcher).
//   DMLC_NUM_SERVER    number of servers (MXJob and every launcher).
//   DMLC_PS_ROOT_URI   ps-lite's *scheduler* host (MXJob: the Scheduler replica's service name,
//   DMLC_PS_ROOT_PORT  "" and "0" without one; launch.py: the submitting host and the first
//                      free port from 9091).
//   DMLC_WORKER_ID     MXJob sets it on workers only (for BytePS); dmlc's kubernetes launcher
//                      on workers. Read only for workers.
//   DMLC_SERVER_ID     dmlc's kubernetes launcher, on servers (it also sets DMLC_SERVER_ID=0
//                      on workers, which is why each role reads only its own variable).
//                      MXJob gives servers no index variable at all.
//   DMLC_TASK_ID       launch.py's local launcher numbers all tasks, workers 0..W-1 then
//                      servers W..W+S-1, and sets DMLC_JOB_CLUSTER=local: a server's index is
//                      then DMLC_TASK_ID minus the worker count. YARN numbers each role from 0.
//                      The ssh and mpi launchers set no index: ps-lite's scheduler hands out
//                      ranks at run time.
// TF_CONFIG (TensorFlow's JSON, which Kubeflow's TFJob injects) ranks after TESSERA_* and
// before DMLC_*: {"cluster": {"ps": [...], "worker": [...], "chief": [...]}, "task":
// {"type": "ps" | "worker" | "chief", "index": N}}. Servers are cluster.ps, workers the chief
// (or "master") followed by cluster.worker, so the chief is worker 0 and worker i is worker
// i + 1; type "ps" is a server. Other task types (evaluator) are FAILED_PRECONDITION: Tessera
// has no such process. Messages name TF_CONFIG.cluster.ps, TF_CONFIG.task.index, ...
//
//   Not read: MX_CONFIG (MXJob's JSON with every replica's address and this pod's index),
//   DMLC_USE_KUBERNETES, DMLC_NODE_HOST, DMLC_INTERFACE.
//
// Server addresses from DMLC variables alone. ps-lite learns the servers' addresses from its
// scheduler at run time, so the DMLC variables name no server. Tessera's rule: server i is at
// DMLC_PS_ROOT_URI:(DMLC_PS_ROOT_PORT + i), for i < DMLC_NUM_SERVER. That only holds where
// the servers really are started that way (e.g. all servers on one host with consecutive
// ports); it is NOT where MXJob or launch.py put them. Everywhere else set TESSERA_PS_HOSTS.
// For an MXJob: no Scheduler replica; in the pod templates' env
// TESSERA_PS_HOSTS=<job>-server-0:<port>,<job>-server-1:<port>,... (the operator's per-replica
// service names, <port> the containers' mxjob-port), and, with more than one server, start the
// server as `tessera-ps --index=${HOSTNAME##*-}` (the pod name ends in its replica index).
//
// Errors are INVALID_ARGUMENT naming the flag or variable and its value (FAILED_PRECONDITION
// for the scheduler role). Counts are 1..65536, ports 1..65535.
//
// Thread-safety: ClusterSpec is a plain value; ResolveClusterSpec is as thread-safe as the
// EnvLookup it is given (ProcessEnvironment() races with setenv).
#ifndef TESSERA_KVSTORE_CLUSTER_SPEC_H_
#define TESSERA_KVSTORE_CLUSTER_SPEC_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::kvstore {

// The most servers or workers one cluster may name: bounds every count taken from flags or
// from a request, so that a typo or a hostile JobSpec cannot make anyone allocate gigabytes
// of placeholder entries.
inline constexpr int kMaxClusterProcesses = 1 << 16;

enum class Role { kWorker, kServer };

// "worker", "server".
const char* RoleName(Role role);

struct ClusterSpec {
  Role role = Role::kWorker;
  int index = 0;                     // this process's rank among the processes of its role
  // "host:port" of every parameter server, in index order ("" each on a server given only
  // their count)
  std::vector<std::string> servers;
  std::vector<std::string> workers;  // "host:port" of every worker, or "" each if not known

  int num_servers() const { return static_cast<int>(servers.size()); }
  int num_workers() const { return static_cast<int>(workers.size()); }

  // "worker 1 of 2, servers [a:1, b:2]"; a server adds the worker count ("..., 3 workers"), and
  // known worker addresses are listed (", workers [c:3, d:4]").
  std::string DebugString() const;
};

// Values from a daemon's command-line flags; they win over the environment. Unset: nullopt.
// Error messages call them --role, --index, --ps_hosts, --worker_hosts, --num_workers,
// --num_servers.
struct ClusterSpecFlags {
  std::optional<std::string> role;
  std::optional<std::string> ps_hosts;      // comma-separated host:port list
  std::optional<std::string> worker_hosts;  // comma-separated host:port list
  std::optional<int> index;
  std::optional<int> num_workers;  // the worker count alone, when their addresses are unknown
  std::optional<int> num_servers;  // the server count alone (servers only)
};

// Looks an environment variable up; nullopt if unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (std::getenv).
EnvLookup ProcessEnvironment();

absl::StatusOr<ClusterSpec> ResolveClusterSpec(const ClusterSpecFlags& flags,
                                               const EnvLookup& env = ProcessEnvironment());

}  // namespace tessera::kvstore

#endif  // TESSERA_KVSTORE_CLUSTER_SPEC_H_

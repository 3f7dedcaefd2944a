// tessera-ps: one parameter-server daemon. A thin shell: flags and environment make a
// ClusterSpec, ParameterServer serves until a stop command, SIGTERM or SIGINT.
//
//   tessera-ps --index=0 --ps_hosts=127.0.0.1:9000,127.0.0.1:9001 --num_workers=2
//   TESSERA_ROLE=server TESSERA_INDEX=0 TESSERA_PS_HOSTS=... TESSERA_WORKER_HOSTS=... tessera-ps
//
// It listens on --address, or on the loopback interface at its own entry's port in the
// server list. --address=127.0.0.1:0 picks a free port (an entry of the list must name a
// port in 1..65535, so port 0 cannot come from there); --port_file receives the bound port.
// Beyond loopback it serves only over TLS with a cluster token (--tls_dir, --token_file) or
// with --insecure (rpc/server.h). --metrics_address serves Prometheus metrics, secured alike.
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/daemon.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "kvstore/cluster_spec.h"
#include "ndarray/runtime_metrics.h"
#include "rpc/metrics_flags.h"
#include "rpc/security_flags.h"
#include "rpc/server.h"
#include "server/parameter_server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, address, "",
          "host:port (or unix:PATH) to listen on; default: 127.0.0.1 and this server's port "
          "in --ps_hosts");
ABSL_FLAG(int, parent_pid, 0,
          "stop (SIGTERM) when this process dies, e.g. the launcher of a local cluster; 0: never");
ABSL_FLAG(std::string, port_file, "",
          "write the bound port (0 on a Unix socket) and a newline to this file, once serving");
ABSL_FLAG(std::optional<int>, index, std::nullopt, "this server's index (TESSERA_INDEX)");
ABSL_FLAG(std::optional<std::string>, ps_hosts, std::nullopt,
          "comma-separated host:port of every server (TESSERA_PS_HOSTS)");
ABSL_FLAG(std::optional<std::string>, worker_hosts, std::nullopt,
          "comma-separated host:port of every worker (TESSERA_WORKER_HOSTS)");
ABSL_FLAG(std::optional<int>, num_servers, std::nullopt,
          "the number of servers, when --ps_hosts is not given (then --address is required)");
ABSL_FLAG(absl::Duration, round_timeout, absl::Seconds(120),
          "dist_sync: a round or barrier waiting this long for silent workers fails, naming them");
ABSL_FLAG(std::optional<int>, replicas, std::nullopt,
          "copies of each key part: 2 (this server's parts also on its backup, the next server) "
          "or 1; default: 2 with two or more servers whose addresses are known, else 1");
ABSL_FLAG(std::string, backup, "",
          "the backup's address (host:port or unix:PATH); default: the next server's in "
          "--ps_hosts");
ABSL_FLAG(std::string, peers, "",
          "comma-separated address of every server, by index (host:port or unix:PATH), where "
          "keys this server takes over in a failover are copied to once their own server is back; "
          "default: --ps_hosts");
ABSL_FLAG(std::optional<int>, num_workers, std::nullopt,
          "number of workers when their addresses are not given (TESSERA_NUM_WORKERS)");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "tessera-ps: %s\n", std::string(status.message()).c_str());
  return 1;
}

// Every server's address, for copies of the keys taken over in a failover (--peers, else the
// cluster's); none without replication.
std::vector<std::string> Peers(const tessera::kvstore::ClusterSpec& spec,
                               const std::string& backup) {
  if (backup.empty()) return {};
  if (const std::string peers = absl::GetFlag(FLAGS_peers); !peers.empty()) {
    return absl::StrSplit(peers, ',');
  }
  return spec.servers;
}

// Where this server replicates its key parts ("": nowhere), from --replicas and --backup.
absl::StatusOr<std::string> BackupAddress(const tessera::kvstore::ClusterSpec& spec) {
  const std::optional<int> replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas.has_value() && *replicas != 1 && *replicas != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas must be 1 or 2, got ", *replicas));
  }
  if (replicas == 1) return std::string();
  std::string backup = absl::GetFlag(FLAGS_backup);
  if (backup.empty() && spec.num_servers() >= 2) {
    backup = spec.servers[(spec.index + 1) % spec.num_servers()];
  }
  if (replicas == 2 && (spec.num_servers() < 2 || backup.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas=2 needs a second server and its address (--ps_hosts or --backup); this is "
        "server ", spec.index, " of ", spec.num_servers()));
  }
  return spec.num_servers() >= 2 ? backup : std::string();
}

}  // namespace

int main(int argc, char** argv) {
  tessera::ParseDaemonFlags(argc, argv, "tessera-ps: a Tessera parameter server (dist_sync, dist_async)");
  // Every round allocates and frees buffers of the size of the pushed and pulled parts. By
  // default glibc hands freed memory above 128 KiB back to the kernel, and each new buffer
  // then costs a page fault per 4 KiB (half the daemon's time with 64 MiB arrays). Keep it:
  // buffers up to 32 MiB (glibc's maximum) come from the heap, which is never trimmed below 1 GiB.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  tessera::InitLogging();

  tessera::kvstore::ClusterSpecFlags flags;
  flags.role = "server";
  flags.index = absl::GetFlag(FLAGS_index);
  flags.ps_hosts = absl::GetFlag(FLAGS_ps_hosts);
  flags.worker_hosts = absl::GetFlag(FLAGS_worker_hosts);
  flags.num_workers = absl::GetFlag(FLAGS_num_workers);
  flags.num_servers = absl::GetFlag(FLAGS_num_servers);
  absl::StatusOr<tessera::kvstore::ClusterSpec> spec = tessera::kvstore::ResolveClusterSpec(flags);
  if (!spec.ok()) return Fail(spec.status());

  std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) {
    const std::string& mine = spec->servers[spec->index];
    if (mine.empty()) {
      return Fail(absl::InvalidArgumentError(
          "--address is required when the servers' addresses are not given (--num_servers)"));
    }
    address = absl::StrCat("127.0.0.1:", mine.substr(mine.rfind(':') + 1));
  }
  tessera::kvstore::ServerStoreOptions options;
  options.server_index = spec->index;
  options.num_servers = spec->num_servers();
  options.num_workers = spec->num_workers();
  options.round_timeout = absl::GetFlag(FLAGS_round_timeout);
  if (options.round_timeout <= absl::ZeroDuration()) {
    return Fail(absl::InvalidArgumentError("--round_timeout must be positive"));
  }

  absl::StatusOr<std::string> backup = BackupAddress(*spec);
  if (!backup.ok()) return Fail(backup.status());

  // Signals stop the server from a thread of their own (set up before gRPC starts threads).
  tessera::server::ParameterServer* serving = nullptr;
  tessera::Mutex serving_mu;
  tessera::OnTerminationSignal([&](int signo) {
    spdlog::info("tessera-ps: signal {}, shutting down", signo);
    tessera::MutexLock lock(&serving_mu);
    if (serving != nullptr) serving->Shutdown();
  });
  tessera::StopWithParent(absl::GetFlag(FLAGS_parent_pid));
  tessera::rpc::SetUpGrpcForDaemon();  // after the signal mask: gRPC starts threads
  absl::StatusOr<tessera::rpc::TransportSecurity> security =
      tessera::rpc::TransportSecurityFromFlags();
  if (!security.ok()) return Fail(security.status());
  absl::StatusOr<std::unique_ptr<tessera::server::ParameterServer>> ps =
      tessera::server::ParameterServer::Start(address, options, *security, *backup,
                                              Peers(*spec, *backup));
  if (!ps.ok()) return Fail(ps.status());
  {
    tessera::MutexLock lock(&serving_mu);
    serving = ps->get();
  }
  spdlog::info("tessera-ps {} of {} serving {} workers on {}{}", spec->index, spec->num_servers(),
               spec->num_workers(), (*ps)->listening_address(),
               backup->empty() ? ", without a backup" : absl::StrCat(", backed up by ", *backup));
  const tessera::RuntimeMetrics runtime_metrics((*ps)->runtime());
  absl::StatusOr<std::unique_ptr<tessera::rpc::MetricsServer>> metrics =
      tessera::rpc::MetricsServerFromFlags("tessera-ps", *security,
                                           {&tessera::ProcessMetrics(), &runtime_metrics});
  if (!metrics.ok()) return Fail(metrics.status());
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    if (absl::Status written = tessera::WritePortFile(path, (*ps)->port()); !written.ok()) {
      return Fail(written);
    }
  }
  (*ps)->Wait();
  {
    tessera::MutexLock lock(&serving_mu);
    serving = nullptr;
  }
  spdlog::info("tessera-ps {} stopped", spec->index);
  return 0;
}

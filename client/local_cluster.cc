#include "client/local_cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cpu_count.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "rpc/address.h"
#include "rpc/transport_security.h"
#include "spdlog/spdlog.h"

namespace tessera::client {

std::string SiblingBinary(const std::string& relative) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path().parent_path() / relative).string();
}

namespace {

// A new folder for the daemons' sockets, readable by this user only (mkdtemp's mode 0700):
// under TMPDIR when a socket's path there fits a sockaddr_un, else under /tmp (a test
// runner's TMPDIR can be longer).
absl::StatusOr<std::string> NewSocketFolder() {
  constexpr absl::string_view kLongestSocket = "/tessera-sockets-XXXXXX/worker-9999.sock";
  std::error_code ec;
  std::string parent = std::filesystem::temp_directory_path(ec).string();
  if (ec || parent.size() + kLongestSocket.size() > rpc::kMaxUnixSocketPath) parent = "/tmp";
  std::string folder = parent + "/tessera-sockets-XXXXXX";
  if (mkdtemp(folder.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a folder for the daemons' sockets in ",
                                            parent, ": ", std::strerror(errno)));
  }
  return folder;
}

}  // namespace

std::vector<std::vector<int>> SplitCpus(const std::vector<int>& cpus, int parts) {
  std::vector<std::vector<int>> shares(std::max(parts, 0));
  const int n = static_cast<int>(cpus.size());
  if (n == 0) return shares;
  for (int p = 0; p < parts; ++p) {
    if (parts >= n) {
      shares[p] = {cpus[p % n]};
    } else {
      shares[p].assign(cpus.begin() + p * n / parts, cpus.begin() + (p + 1) * n / parts);
    }
  }
  return shares;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const LocalClusterOptions& options) {
  // No servers is a cluster for kvstore "local" jobs.
  if (options.num_servers < 0 || options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a local cluster needs at least one worker and no negative server count, got ",
                                                   options.num_servers, " server(s) and ", options.num_workers, " worker(s)"));
  }
  const std::string ps = options.ps_binary.empty() ? SiblingBinary("server/tessera-ps") : options.ps_binary;
  const std::string worker =
      options.worker_binary.empty() ? SiblingBinary("worker/tessera-worker") : options.worker_binary;
  for (const std::string& binary : {ps, worker}) {
    if (access(binary.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(binary, " is missing (build it: bazel build //server:tessera-ps //worker:tessera-worker)"));
    }
  }
  const std::filesystem::path logs = std::filesystem::path(options.run_dir) / "logs";
  std::error_code ec;
  std::filesystem::create_directories(logs, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", logs.string(), ": ", ec.message()));

  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  ASSIGN_OR_RETURN(cluster->socket_dir_, NewSocketFolder());
  ASSIGN_OR_RETURN(cluster->cluster_.security.token, rpc::NewToken());
  const std::string token_file = cluster->token_file_ = (logs / "cluster.token").string();
  RETURN_IF_ERROR(WriteStringToFile(token_file, cluster->cluster_.security.token, kOwnerOnly));
  // The workers share this machine's cores: each gets its share of OpenMP threads, as
  // oversubscribed OpenMP (oneDNN's kernels) spins and runs several times slower.
  const std::string omp_threads = absl::StrCat(std::max(1, AvailableCpus() / options.num_workers));
  // Each daemon's socket, named before it exists (servers point at each other).
  auto socket = [&](const std::string& name) {
    return absl::StrCat("unix:", cluster->socket_dir_, "/", name, ".sock");
  };
  auto start = [&](const std::string& name, std::vector<std::string> argv) -> absl::Status {
    Daemon d;
    d.name = name;
    d.log = (logs / (name + ".log")).string();
    // The port file says the daemon serves (its port is 0 on a socket).
    const std::string port_file = (logs / (name + ".port")).string();
    std::filesystem::remove(port_file, ec);
    const std::string address = socket(name);
    argv.push_back("--address=" + address);
    argv.push_back("--port_file=" + port_file);
    argv.push_back("--token_file=" + token_file);
    if (options.stop_with_this_process) argv.push_back(absl::StrCat("--parent_pid=", getpid()));
    d.socket = address.substr(5);
    d.start = {.argv = argv,
               .env = {{"OMP_NUM_THREADS", omp_threads}},
               .stdout_path = d.log,
               .stderr_path = d.log};
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(d.start);
    if (!p.ok()) return p.status();
    d.process = std::move(*p);
    cluster->daemons_.push_back(std::move(d));
    absl::StatusOr<std::string> port = WaitForFile(port_file, absl::Seconds(60));
    if (!port.ok()) {
      return absl::UnavailableError(absl::StrCat(name, " did not start (see ", cluster->daemons_.back().log,
                                                 "): ", port.status().message()));
    }
    (name.rfind("ps", 0) == 0 ? cluster->cluster_.servers : cluster->cluster_.workers).push_back(address);
    return absl::OkStatus();
  };
  for (int s = 0; s < options.num_servers; ++s) {
    std::vector<std::string> argv = {ps, absl::StrCat("--index=", s),
                                     absl::StrCat("--num_servers=", options.num_servers),
                                     absl::StrCat("--num_workers=", options.num_workers)};
    // Each server's parts are also on the next one (its socket is named before it exists).
    if (options.num_servers >= 2 && options.replicas >= 2) {
      argv.push_back("--backup=" + socket(absl::StrCat("ps-", (s + 1) % options.num_servers)));
      std::vector<std::string> peers;
      for (int p = 0; p < options.num_servers; ++p) peers.push_back(socket(absl::StrCat("ps-", p)));
      argv.push_back("--peers=" + absl::StrJoin(peers, ","));
    }
    absl::Status st = start(absl::StrCat("ps-", s), std::move(argv));
    if (!st.ok()) return st;
  }
  const std::vector<std::vector<int>> shares =
      options.pin_workers ? SplitCpus(AffinityCpuIds(), options.num_workers)
                          : std::vector<std::vector<int>>();
  for (int w = 0; w < options.num_workers; ++w) {
    std::vector<std::string> argv;
    if (w < static_cast<int>(shares.size()) && !shares[w].empty()) {
      argv = {"taskset", "--cpu-list", absl::StrJoin(shares[w], ",")};
    }
    argv.insert(argv.end(),
                {worker, absl::StrCat("--seed=", w), "--data_root=" + options.data_root,
                 "--run_root=" + (options.run_root.empty() ? options.run_dir : options.run_root)});
    absl::Status st = start(absl::StrCat("worker-", w), std::move(argv));
    if (!st.ok()) return st;
  }
  if (options.max_restarts > 0) {
    cluster->supervisor_ = std::thread([c = cluster.get(), n = options.max_restarts] { c->Supervise(n); });
  }
  return cluster;
}

void LocalCluster::Supervise(int max_restarts) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stopping_; })) {
    const absl::Time now = absl::Now();
    for (Daemon& d : daemons_) {
      if (d.process->running() || d.restarts >= max_restarts) continue;
      if (d.restart_at == absl::InfiniteFuture()) {
        const absl::StatusOr<ExitStatus> exit = d.process->Wait(absl::ZeroDuration());
        // A daemon that ran a while before it died is not crash-looping: no long back-off.
        constexpr absl::Duration kSteadyRun = absl::Seconds(10);
        d.quick_exits = now - d.started >= kSteadyRun ? 0 : d.quick_exits + 1;
        const absl::Duration backoff = std::min(
            absl::Milliseconds(200) * (1 << std::min(std::max(d.quick_exits - 1, 0), 5)),
            absl::Seconds(5));
        d.restart_at = now + backoff;
        spdlog::warn("local cluster: {} exited ({}); starting it again in {} ({} of {})", d.name,
                     exit.ok() ? exit->ToString() : "unknown", absl::FormatDuration(backoff),
                     d.restarts + 1, max_restarts);
        continue;
      }
      if (now < d.restart_at) continue;
      ++d.restarts;
      d.restart_at = absl::InfiniteFuture();
      std::error_code ec;
      std::filesystem::rename(d.log, absl::StrCat(d.log, ".", d.restarts), ec);
      std::filesystem::remove(d.socket, ec);  // the dead one's; a new bind needs the name free
      absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(d.start);
      if (!p.ok()) {
        spdlog::error("local cluster: starting {} again: {}", d.name, p.status().ToString());
        continue;
      }
      d.process = std::move(*p);
      d.started = absl::Now();
    }
  }
}

int LocalCluster::restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const Daemon& d : daemons_) n += d.restarts;
  return n;
}

LocalCluster::~LocalCluster() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  for (Daemon& d : daemons_) {
    if (d.process->running()) (void)d.process->Signal(SIGTERM);
  }
  for (Daemon& d : daemons_) {
    if (!d.process->Wait(absl::Seconds(10)).ok()) (void)d.process->Signal(SIGKILL);
  }
  std::error_code ec;
  if (!socket_dir_.empty()) std::filesystem::remove_all(socket_dir_, ec);
}

absl::Status LocalCluster::CheckAlive() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Daemon& d : daemons_) {
    if (d.process->running()) continue;
    absl::StatusOr<ExitStatus> exit = d.process->Wait(absl::ZeroDuration());
    return absl::UnavailableError(absl::StrCat(d.name, " exited (", exit.ok() ? exit->ToString() : "unknown",
                                               "); its log: ", d.log));
  }
  return absl::OkStatus();
}

std::vector<int> LocalCluster::pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> pids;
  for (const Daemon& d : daemons_) pids.push_back(d.process->pid());
  return pids;
}

}  // namespace tessera::client

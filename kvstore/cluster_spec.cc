#include "kvstore/cluster_spec.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera::kvstore {
namespace {

// A raw value and where it came from ("--ps_hosts", "TESSERA_PS_HOSTS"), for messages.
struct Setting {
  std::string value;
  std::string source;
};

// The flag if given, else the first of `vars` that is set and non-empty. Empty counts as unset
// because launchers often export a variable as "" rather than leave it out (MXJob does so
// for DMLC_PS_ROOT_URI when there is no scheduler).
std::optional<Setting> Lookup(const std::optional<std::string>& flag, const char* flag_name,
                              const EnvLookup& env, std::initializer_list<const char*> vars) {
  if (flag.has_value()) return Setting{*flag, flag_name};
  for (const char* var : vars) {
    std::optional<std::string> value = env(var);
    if (value.has_value() && !value->empty()) return Setting{*value, var};
  }
  return std::nullopt;
}

std::optional<Setting> LookupEnv(const EnvLookup& env, const char* var) {
  return Lookup(std::nullopt, "", env, {var});
}

std::optional<std::string> IntFlag(const std::optional<int>& flag) {
  if (!flag.has_value()) return std::nullopt;
  return std::to_string(*flag);
}

absl::Status Invalid(const Setting& s, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(s.source, "='", s.value, "': ", problem));
}

absl::StatusOr<int> ParseInt(const Setting& s, int min, int max = INT_MAX) {
  int value = 0;
  if (!absl::SimpleAtoi(s.value, &value)) return Invalid(s, "not an integer");
  if (value < min) return Invalid(s, absl::StrCat("must be at least ", min));
  if (value > max) return Invalid(s, absl::StrCat("must be at most ", max));
  return value;
}

// "" if `entry` is a valid host:port, else what is wrong with it.
std::string HostPortProblem(absl::string_view entry) {
  size_t colon = entry.rfind(':');
  if (colon == absl::string_view::npos) return "expected host:port";
  absl::string_view host = entry.substr(0, colon), port = entry.substr(colon + 1);
  if (absl::StartsWith(host, "[")) {
    if (!absl::EndsWith(host, "]") || host.size() < 3) return "malformed bracketed IPv6 host";
  } else if (absl::StrContains(host, ':')) {
    return "an IPv6 host must be in brackets, as [::1]:9000";
  }
  if (host.empty()) return "empty host";
  int port_number = 0;
  bool digits = !port.empty() && port.size() <= 5 &&
                std::all_of(port.begin(), port.end(), absl::ascii_isdigit);
  if (!digits || !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return absl::StrCat("port '", port, "' is not a number in 1..65535");
  }
  return "";
}

absl::StatusOr<std::vector<std::string>> ParseHostList(const Setting& s) {
  std::vector<std::string> hosts;
  for (absl::string_view entry : absl::StrSplit(s.value, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    std::string problem = entry.empty() ? "empty" : HostPortProblem(entry);
    if (!problem.empty()) {
      return Invalid(s, absl::StrCat("entry ", hosts.size(), " '", entry, "': ", problem));
    }
    hosts.emplace_back(entry);
  }
  return hosts;
}

// TF_CONFIG (TensorFlow's cluster description, which Kubeflow's TFJob injects) offered as
// pseudo-variables beside the real environment, so the usual lookups and messages apply:
// TF_CONFIG.task.type, TF_CONFIG.task.index, TF_CONFIG.cluster.ps, TF_CONFIG.cluster.worker
// (the chief, or master, first: it is worker 0).
constexpr char kTfRole[] = "TF_CONFIG.task.type";
constexpr char kTfIndex[] = "TF_CONFIG.task.index";
constexpr char kTfServers[] = "TF_CONFIG.cluster.ps";
constexpr char kTfWorkers[] = "TF_CONFIG.cluster.worker";

absl::StatusOr<EnvLookup> WithTfConfig(const EnvLookup& env) {
  std::optional<std::string> text = env("TF_CONFIG");
  if (!text.has_value() || absl::StripAsciiWhitespace(*text).empty()) return env;
  const nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto invalid = [&](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG='", *text, "': ", problem));
  };
  if (!config.is_object()) return invalid("not a JSON object");
  std::map<std::string, std::string> values;
  auto hosts = [&](const char* job, std::vector<std::string>* out) -> absl::Status {
    if (!config.contains("cluster") || !config["cluster"].is_object()) {
      return invalid("no \"cluster\" object");
    }
    const nlohmann::json& cluster = config["cluster"];
    if (!cluster.contains(job)) return absl::OkStatus();
    if (!cluster[job].is_array()) return invalid(absl::StrCat("cluster.", job, " is not a list"));
    for (const nlohmann::json& host : cluster[job]) {
      if (!host.is_string()) return invalid(absl::StrCat("cluster.", job, " holds a non-string"));
      out->push_back(host.get<std::string>());
    }
    return absl::OkStatus();
  };
  std::vector<std::string> chiefs, workers, servers;
  RETURN_IF_ERROR(hosts("chief", &chiefs));
  RETURN_IF_ERROR(hosts("master", &chiefs));
  RETURN_IF_ERROR(hosts("worker", &workers));
  RETURN_IF_ERROR(hosts("ps", &servers));
  if (chiefs.size() > 1) return invalid("more than one chief");
  workers.insert(workers.begin(), chiefs.begin(), chiefs.end());
  if (!servers.empty()) values[kTfServers] = absl::StrJoin(servers, ",");
  if (!workers.empty()) values[kTfWorkers] = absl::StrJoin(workers, ",");
  if (config.contains("task")) {
    const nlohmann::json& task = config["task"];
    if (!task.is_object() || !task.contains("type") || !task["type"].is_string() ||
        !task.contains("index") || !task["index"].is_number_integer()) {
      return invalid("task must be {\"type\": \"ps\" | \"worker\" | \"chief\", \"index\": N}");
    }
    const std::string type = task["type"].get<std::string>();
    const int64_t index = task["index"].get<int64_t>();
    if (type == "ps") {
      values[kTfRole] = "server";
      values[kTfIndex] = absl::StrCat(index);
    } else if (type == "chief" || type == "master") {
      values[kTfRole] = "worker";
      values[kTfIndex] = absl::StrCat(index);
    } else if (type == "worker") {
      values[kTfRole] = "worker";
      values[kTfIndex] = absl::StrCat(index + static_cast<int64_t>(chiefs.size()));
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "TF_CONFIG task type '", type, "': Tessera runs parameter servers (ps) and workers "
          "(chief, worker) only, so this process must not be started (remove the replica)"));
    }
  }
  return EnvLookup([env, values](const std::string& name) -> std::optional<std::string> {
    if (auto it = values.find(name); it != values.end()) return it->second;
    return env(name);
  });
}

absl::StatusOr<Role> ResolveRole(const ClusterSpecFlags& flags, const EnvLookup& env) {
  std::optional<Setting> role =
      Lookup(flags.role, "--role", env, {"TESSERA_ROLE", kTfRole, "DMLC_ROLE"});
  if (!role.has_value()) return Role::kWorker;
  std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(role->value));
  if (name == "worker") return Role::kWorker;
  if (name == "server") return Role::kServer;
  if (name == "scheduler") {
    return absl::FailedPreconditionError(absl::StrCat(
        role->source, "='", role->value,
        "': Tessera has no scheduler process (workers connect to the parameter servers "
        "directly, listed in --ps_hosts / TESSERA_PS_HOSTS), so this process must not be "
        "started: remove the Scheduler replica from the MXJob, or the scheduler from the "
        "launcher"));
  }
  return Invalid(*role, "unknown role, expected worker or server");
}

// The servers: an explicit list, else (a server only) a count from --num_servers, else the
// DMLC rule (server i at ROOT_URI:ROOT_PORT+i).
absl::StatusOr<std::vector<std::string>> ResolveServers(const ClusterSpecFlags& flags,
                                                        const EnvLookup& env, Role role) {
  std::optional<Setting> num_server =
      Lookup(IntFlag(flags.num_servers), "--num_servers", env, {"DMLC_NUM_SERVER"});
  std::optional<int> count;
  if (num_server.has_value()) {
    ASSIGN_OR_RETURN(count, ParseInt(*num_server, 1, kMaxClusterProcesses));
  }

  if (std::optional<Setting> hosts =
          Lookup(flags.ps_hosts, "--ps_hosts", env, {"TESSERA_PS_HOSTS", kTfServers})) {
    ASSIGN_OR_RETURN(std::vector<std::string> servers, ParseHostList(*hosts));
    if (count.has_value() && *count != static_cast<int>(servers.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(num_server->source, "=", *count, " disagrees with the ", servers.size(),
                       " servers in ", hosts->source, "='", hosts->value, "'"));
    }
    return servers;
  }
  if (flags.num_servers.has_value()) {
    if (role != Role::kServer) {
      return absl::InvalidArgumentError(
          "--num_servers alone is for servers: a worker needs the servers' addresses "
          "(--ps_hosts or TESSERA_PS_HOSTS)");
    }
    return std::vector<std::string>(*count);
  }

  std::optional<Setting> uri = LookupEnv(env, "DMLC_PS_ROOT_URI");
  if (!uri.has_value()) {
    return absl::InvalidArgumentError(
        "no parameter servers: set --ps_hosts or TESSERA_PS_HOSTS to host:port,... (or "
        "DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT and DMLC_NUM_SERVER, see cluster_spec.h)");
  }
  std::optional<Setting> port = LookupEnv(env, "DMLC_PS_ROOT_PORT");
  if (!port.has_value() || !count.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DMLC_PS_ROOT_URI is set but ", port.has_value() ? "DMLC_NUM_SERVER" : "DMLC_PS_ROOT_PORT",
        " is not; set both, or list the servers in TESSERA_PS_HOSTS"));
  }
  ASSIGN_OR_RETURN(int base, ParseInt(*port, 1, 65535));
  if (base + int64_t{*count} - 1 > 65535) {
    return Invalid(*port, absl::StrCat("with DMLC_NUM_SERVER=", *count,
                                       " consecutive server ports run past 65535"));
  }
  std::string host = std::string(absl::StripAsciiWhitespace(uri->value));
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "["))
    host = absl::StrCat("[", host, "]");
  std::vector<std::string> servers;
  for (int i = 0; i < *count; ++i) servers.push_back(absl::StrCat(host, ":", base + i));
  if (std::string problem = HostPortProblem(servers[0]); !problem.empty()) {
    return Invalid(*uri, problem);
  }
  return servers;
}

// The workers: an address list, or a count of placeholder entries.
absl::StatusOr<std::vector<std::string>> ResolveWorkers(const ClusterSpecFlags& flags,
                                                        const EnvLookup& env) {
  std::optional<Setting> count_setting = Lookup(IntFlag(flags.num_workers), "--num_workers", env,
                                                {"TESSERA_NUM_WORKERS", "DMLC_NUM_WORKER"});
  std::optional<int> count;
  if (count_setting.has_value()) {
    ASSIGN_OR_RETURN(count, ParseInt(*count_setting, 1, kMaxClusterProcesses));
  }

  if (std::optional<Setting> hosts = Lookup(flags.worker_hosts, "--worker_hosts", env,
                                            {"TESSERA_WORKER_HOSTS", kTfWorkers})) {
    ASSIGN_OR_RETURN(std::vector<std::string> workers, ParseHostList(*hosts));
    if (count.has_value() && *count != static_cast<int>(workers.size())) {
      return Invalid(*count_setting,
                     absl::StrCat("disagrees with the ", workers.size(), " workers in ",
                                  hosts->source, "='", hosts->value, "'"));
    }
    return workers;
  }
  if (!count.has_value()) {
    return absl::InvalidArgumentError(
        "no workers: set --worker_hosts or TESSERA_WORKER_HOSTS, or their number with "
        "--num_workers, TESSERA_NUM_WORKERS or DMLC_NUM_WORKER");
  }
  return std::vector<std::string>(*count);
}

absl::StatusOr<int> ResolveIndex(const ClusterSpecFlags& flags, const EnvLookup& env, Role role,
                                 int num_workers, int role_count) {
  const bool worker = role == Role::kWorker;
  std::optional<Setting> index =
      Lookup(IntFlag(flags.index), "--index", env,
             {"TESSERA_INDEX", kTfIndex, worker ? "DMLC_WORKER_ID" : "DMLC_SERVER_ID",
              "DMLC_TASK_ID"});
  if (!index.has_value()) {
    if (role_count == 1) return 0;
    return absl::InvalidArgumentError(
        absl::StrCat("no index for this ", RoleName(role), " (one of ", role_count,
                     "): set --index or TESSERA_INDEX (or ",
                     worker ? "DMLC_WORKER_ID" : "DMLC_SERVER_ID", " or DMLC_TASK_ID)"));
  }
  ASSIGN_OR_RETURN(int value, ParseInt(*index, 0));
  std::optional<Setting> cluster = LookupEnv(env, "DMLC_JOB_CLUSTER");
  if (!worker && index->source == "DMLC_TASK_ID" && cluster.has_value() &&
      cluster->value == "local") {
    // dmlc's local launcher numbers the servers after the workers.
    if (value < num_workers) {
      return Invalid(*index, absl::StrCat("with DMLC_JOB_CLUSTER=local, server task ids start "
                                          "after the ",
                                          num_workers, " workers' ids"));
    }
    value -= num_workers;
  }
  if (value >= role_count) {
    return Invalid(*index, absl::StrCat("must be less than the number of ", RoleName(role), "s (",
                                        role_count, ")"));
  }
  return value;
}

}  // namespace

const char* RoleName(Role role) { return role == Role::kServer ? "server" : "worker"; }

std::string ClusterSpec::DebugString() const {
  std::string out = absl::StrCat(RoleName(role), " ", index, " of ",
                                 role == Role::kServer ? num_servers() : num_workers());
  const bool server_addresses =
      std::any_of(servers.begin(), servers.end(), [](const std::string& s) { return !s.empty(); });
  if (server_addresses) absl::StrAppend(&out, ", servers [", absl::StrJoin(servers, ", "), "]");
  bool worker_addresses =
      std::any_of(workers.begin(), workers.end(), [](const std::string& w) { return !w.empty(); });
  if (worker_addresses) {
    absl::StrAppend(&out, ", workers [", absl::StrJoin(workers, ", "), "]");
  } else if (role == Role::kServer) {
    absl::StrAppend(&out, ", ", num_workers(), " workers");
  }
  return out;
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<ClusterSpec> ResolveClusterSpec(const ClusterSpecFlags& flags,
                                               const EnvLookup& process_env) {
  ASSIGN_OR_RETURN(const EnvLookup env, WithTfConfig(process_env));
  ClusterSpec spec;
  ASSIGN_OR_RETURN(spec.role, ResolveRole(flags, env));
  ASSIGN_OR_RETURN(spec.servers, ResolveServers(flags, env, spec.role));
  ASSIGN_OR_RETURN(spec.workers, ResolveWorkers(flags, env));
  const int role_count = spec.role == Role::kServer ? spec.num_servers() : spec.num_workers();
  ASSIGN_OR_RETURN(spec.index, ResolveIndex(flags, env, spec.role, spec.num_workers(), role_count));
  return spec;
}

}  // namespace tessera::kvstore

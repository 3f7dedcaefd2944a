#include "tests/integration/local_cluster.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file.h"
#include "core/status_macros.h"

namespace tessera::integration {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

}  // namespace

std::string RunfilePath(const std::string& path) {
  return absl::StrCat(EnvOr("TEST_SRCDIR", "."), "/", EnvOr("TEST_WORKSPACE", "tessera"), "/",
                      path);
}

LocalCluster::LocalCluster(const std::string& name)
    : dir_(absl::StrCat(EnvOr("TEST_TMPDIR", "/tmp"), "/", name)) {
  std::filesystem::remove_all(dir_);  // a rerun in the same folder must not see old port files
  std::filesystem::create_directories(dir_);
}

absl::StatusOr<Subprocess*> LocalCluster::Start(const std::string& name,
                                                std::vector<std::string> argv, const Env& env) {
  const std::string log = absl::StrCat(dir_, "/", name, ".log");
  ASSIGN_OR_RETURN(
      std::unique_ptr<Subprocess> process,
      Subprocess::Start(
          {.argv = std::move(argv), .env = env, .stdout_path = log, .stderr_path = log}));
  processes_.push_back({name, std::move(process)});
  return processes_.back().process.get();
}

absl::Status LocalCluster::StartServers(int num_servers, int num_workers) {
  std::vector<std::string> port_files;
  for (int i = 0; i < num_servers; ++i) {
    port_files.push_back(absl::StrCat(dir_, "/ps", i, ".port"));
    server_at_.push_back(processes_.size());
    RETURN_IF_ERROR(Start(absl::StrCat("ps", i),
                          {RunfilePath("server/tessera-ps"), absl::StrCat("--index=", i),
                           absl::StrCat("--num_servers=", num_servers),
                           absl::StrCat("--num_workers=", num_workers), "--address=127.0.0.1:0",
                           "--port_file=" + port_files.back()},
                          {})
                        .status());
  }
  for (const std::string& file : port_files) {
    ASSIGN_OR_RETURN(std::string port, WaitForFile(file, absl::Seconds(30)));
    servers_.push_back(absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(port)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Subprocess*> LocalCluster::StartWorker(int rank, int num_workers,
                                                      const std::vector<std::string>& flags,
                                                      const Env& env) {
  std::vector<std::string> argv = {RunfilePath("tests/integration/dist_train_worker"),
                                   "--params_out=" + params_path(rank),
                                   "--hang_file=" + hang_path(rank)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  Env all = {{"TESSERA_ROLE", "worker"},
             {"TESSERA_INDEX", absl::StrCat(rank)},
             {"TESSERA_NUM_WORKERS", absl::StrCat(num_workers)},
             {"TESSERA_PS_HOSTS", absl::StrJoin(servers_, ",")}};
  all.insert(all.end(), env.begin(), env.end());
  return Start(absl::StrCat("worker", rank), std::move(argv), all);
}

std::string LocalCluster::params_path(int rank) const {
  return absl::StrCat(dir_, "/worker", rank, ".params");
}

std::string LocalCluster::hang_path(int rank) const {
  return absl::StrCat(dir_, "/worker", rank, ".hang");
}

std::string LocalCluster::Log(const std::string& name) const {
  return ReadFileToString(absl::StrCat(dir_, "/", name, ".log")).value_or("");
}

std::string LocalCluster::AllLogs() const {
  std::string all;
  for (const Process& p : processes_) {
    absl::StrAppend(&all, "---- ", p.name, " ----\n", Log(p.name));
  }
  return all;
}

}  // namespace tessera::integration

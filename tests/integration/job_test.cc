// Training jobs end to end with real processes: the `tessera` command line (train, launch,
// submit, status) and JobClient against `tessera-ps` and `tessera-worker` daemons on
// loopback, on a small synthetic digit set written as IDX files (each class lights its own
// band of rows, so an MLP learns it in two short epochs and the suite needs no MNIST download).
//
// Why these checks: a job must train and leave its results (metrics, plot, logs, checkpoints)
// and no daemon behind; daemons that were already running must survive jobs that end well,
// are cancelled, or are rejected, and serve the next one; a bad job must be refused with the
// node, field or file named; a worker killed mid-job is replaced and rejoins the run, or, not
// coming back (no supervisor), fails the run naming it,
// without taking the other daemons down or losing the last checkpoint.
//
// Every wait has a deadline well inside Bazel's, so a hang fails the test with the daemons'
// logs instead of timing the whole target out.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "jobs/job_client.h"
#include "client/job_file.h"
#include "client/local_cluster.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "core/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "graph/symbol.h"
#include "graph/symbol_json.h"
#include "tests/integration/command.h"
#include "tests/integration/local_cluster.h"
#include "tests/worker/synthetic_digits.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using tessera::testing::IsOk;
using tessera::testing::StatusIs;
using tessera::testing::WriteDigits;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const absl::Duration kCommandTimeout = absl::Seconds(180);
const absl::Duration kJobTimeout = absl::Seconds(120);

std::string TmpDir() { return ::testing::TempDir(); }
std::string DataDir() { return TmpDir() + "/digits"; }
std::string RunDir(const std::string& name) { return TmpDir() + "/runs/" + name; }

struct Job {
  std::string name;
  std::string model = "mlp";
  std::string symbol_file;  // instead of `model`
  int epochs = 2;
  int workers = 2, servers = 1;
  int replicas = 0;  // 0: the file leaves it to the default
  std::string kvstore = "dist_sync";
  std::string optimizer = "{name: sgd, params: {learning_rate: 0.1, momentum: 0.9}}";
  std::string mnist_dir;  // MNIST's IDX files (empty: the synthetic digits, DataDir())
  bool flat = true;      // the images as vectors (an MLP), or 1x28x28 (LeNet)
  std::string extra;    // more YAML lines
  std::string run_dir;  // empty: RunDir(name)
};

// Writes NAME.yaml for the synthetic digits (its run folder: RunDir(NAME)); returns its path.
std::string WriteJob(const Job& job) {
  const std::string d = job.mnist_dir.empty() ? DataDir() : job.mnist_dir;
  // MNIST's file names, or the digits'.
  auto file = [&](const char* split, const char* what) {
    return job.mnist_dir.empty() ? absl::StrCat(d, "/", split, "-", what)
                                 : absl::StrCat(d, "/", split == std::string("train") ? "train" : "t10k",
                                                "-", what, what == std::string("images") ? "-idx3-ubyte" : "-idx1-ubyte");
  };
  const std::string path = absl::StrCat(TmpDir(), "/", job.name, ".yaml");
  std::ofstream(path) << "name: " << job.name << "\n"
                      << "network: {"
                      << (job.symbol_file.empty() ? "model: " + job.model
                                                  : "symbol_file: " + job.symbol_file)
                      << "}\n"
                      << "data:\n  kind: mnist\n"
                      << "  train_images: " << file("train", "images") << "\n"
                      << "  train_labels: " << file("train", "labels") << "\n"
                      << "  test_images: " << file("test", "images") << "\n"
                      << "  test_labels: " << file("test", "labels") << "\n"
                      << "  flat: " << (job.flat ? "true" : "false") << "\n"
                      << "batch_size: 32\n"
                      << "epochs: " << job.epochs << "\n"
                      << "optimizer: " << job.optimizer << "\n"
                      << "kvstore: " << job.kvstore << "\n"
                      << "cluster: {workers: " << job.workers << ", servers: " << job.servers
                      << (job.replicas > 0 ? absl::StrCat(", replicas: ", job.replicas) : "")
                      << "}\n"
                      << "seed: 1\n"
                      << "run_dir: " << (job.run_dir.empty() ? RunDir(job.name) : job.run_dir)
                      << "\n"
                      << job.extra;
  return path;
}

// The JobSpec `tessera` would submit for `job`; its checkpoints go to RunDir(job.name), which
// exists (as `tessera` creates it).
JobSpec Spec(const Job& job) {
  fs::create_directories(RunDir(job.name));
  absl::StatusOr<client::JobFile> file = client::LoadJobFile(WriteJob(job));
  EXPECT_THAT(file.status(), IsOk());
  return file.ok() ? file->spec : JobSpec();
}

// A command line run to its end.
Command Tessera(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {RunfilePath("client/tessera")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, kCommandTimeout);
}

// The number after "KEY": in a flat JSON object; NaN if missing.
double JsonNumber(const std::string& json, const std::string& key) {
  const std::string tag = absl::StrCat("\"", key, "\":");
  const size_t at = json.find(tag);
  double value = std::nan("");
  if (at == std::string::npos) return value;
  const size_t begin = at + tag.size();
  const size_t end = json.find_first_of(",}", begin);
  if (!absl::SimpleAtod(json.substr(begin, end - begin), &value)) return std::nan("");
  return value;
}

// `tessera jobs --json`'s record of job `id` (null when absent or unreadable).
nlohmann::json JobRecordOf(const Command& jobs, const std::string& id) {
  if (jobs.code != 0 || jobs.lines.empty()) return nullptr;
  const nlohmann::json list = nlohmann::json::parse(jobs.lines.back(), nullptr, false);
  if (list.is_discarded() || !list.contains("jobs")) return nullptr;
  for (const nlohmann::json& job : list["jobs"]) {
    if (job["id"] == id) return job;
  }
  return nullptr;
}

// Batches done by a job's worker 0 since it started, from its record.
int64_t BatchesDone(const nlohmann::json& record) {
  return record["epoch"].get<int64_t>() * record["batches_per_epoch"].get<int64_t>() +
         record["batch"].get<int64_t>();
}

bool AcceptsConnections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return connected;
}

// The daemons a run started have all gone: none of the ports in RUN_DIR/logs/*.port answers.
void ExpectDaemonsGone(const std::string& run_dir, int num_daemons) {
  int ports = 0;
  for (const auto& entry : fs::directory_iterator(run_dir + "/logs")) {
    if (entry.path().extension() != ".port") continue;
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(ReadFileToString(entry.path()).value_or(""), &port))
        << entry.path();
    EXPECT_FALSE(AcceptsConnections(port)) << entry.path() << ": port " << port << " still open";
    ++ports;
  }
  EXPECT_EQ(ports, num_daemons);
}

std::string Logs(const std::string& run_dir) {
  std::string all;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir + "/logs", ec)) {
    if (entry.path().extension() != ".log") continue;
    absl::StrAppend(&all, "---- ", entry.path().string(), " ----\n",
                    ReadFileToString(entry.path()).value_or(""));
  }
  return all;
}

// One daemon as a process of the test; `address` is set once it reports its port.
struct Daemon {
  std::unique_ptr<Subprocess> process;
  std::string address;
  std::string log;
};

Daemon StartDaemon(const std::string& name, std::vector<std::string> argv) {
  const std::string base = absl::StrCat(TmpDir(), "/", name);
  fs::remove(base + ".port");
  argv.push_back("--port_file=" + base + ".port");
  Daemon d;
  d.log = base + ".log";
  auto p = Subprocess::Start({.argv = argv, .stdout_path = d.log, .stderr_path = d.log});
  EXPECT_THAT(p.status(), IsOk());
  if (!p.ok()) return d;
  d.process = std::move(*p);
  absl::StatusOr<std::string> port = WaitForFile(base + ".port", absl::Seconds(30));
  EXPECT_THAT(port.status(), IsOk()) << ReadFileToString(d.log).value_or("");
  if (port.ok()) d.address = absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(*port));
  return d;
}

class JobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(DataDir());
    fs::create_directories(TmpDir() + "/runs");  // the workers' run root
    WriteDigits(DataDir() + "/train-images", DataDir() + "/train-labels", 2048, 1);
    WriteDigits(DataDir() + "/test-images", DataDir() + "/test-labels", 500, 2);
  }
  void TearDown() override {
    if (!HasFailure()) return;
    if (!daemons_dir_.empty()) std::fprintf(stderr, "%s", Logs(daemons_dir_).c_str());
    for (const auto& s : servers_) std::fprintf(stderr, "%s", s->AllLogs().c_str());
  }
  static std::string Name() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // `workers` tessera-worker and `servers` tessera-ps daemons, as the test's own processes.
  void StartDaemons(int workers, int servers) {
    daemons_dir_ = TmpDir() + "/daemons/" + Name();
    auto cluster =
        client::LocalCluster::Start({.num_servers = servers,
                                     .num_workers = workers,
                                     .run_dir = daemons_dir_,
                                     .data_root = DataDir(),
                                     .run_root = TmpDir() + "/runs",
                                     .ps_binary = RunfilePath("server/tessera-ps"),
                                     .worker_binary = RunfilePath("worker/tessera-worker")});
    ASSERT_THAT(cluster.status(), IsOk());
    daemons_ = std::move(*cluster);
    auto client = jobs::JobClient::Connect(daemons_->cluster(), absl::Seconds(30));
    ASSERT_THAT(client.status(), IsOk());
    client_ = std::move(*client);
  }

  // Runs `spec` on the daemons through `client` (default client_). `on_first_epoch` runs on
  // this thread once worker 0 reports its first epoch (while the job goes on); past the
  // deadline the daemons are killed so that Run returns.
  absl::StatusOr<jobs::JobOutcome> RunJob(const JobSpec& spec,
                                            jobs::JobClient* client = nullptr,
                                            const std::function<void()>& on_first_epoch = nullptr) {
    if (client == nullptr) client = client_.get();
    std::promise<void> first_epoch;
    bool seen = false;  // JobClient serializes event calls
    auto run = std::async(std::launch::async, [&] {
      absl::StatusOr<jobs::JobOutcome> outcome =
          client->Run(spec, [&](int rank, const JobEvent& event) {
            if (rank == 0 && event.has_epoch() && !seen) {
              seen = true;
              first_epoch.set_value();
            }
          });
      if (!seen) first_epoch.set_value();  // Run's event calls are over: no race on `seen`
      return outcome;
    });
    if (on_first_epoch) {
      if (first_epoch.get_future().wait_for(absl::ToChronoSeconds(kJobTimeout)) !=
          std::future_status::ready) {
        ADD_FAILURE() << "no epoch event within " << kJobTimeout;
      } else if (run.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        ADD_FAILURE() << "the job ended before its first epoch: " << run.get().status();
        return absl::InternalError("ended early");
      } else {
        on_first_epoch();
      }
    }
    if (run.wait_for(absl::ToChronoSeconds(kJobTimeout)) != std::future_status::ready) {
      ADD_FAILURE() << "the job did not end within " << kJobTimeout << "; killing the daemons";
      for (int pid : daemons_->pids()) kill(pid, SIGKILL);
    }
    return run.get();
  }

  // A tessera-ps of its own for another job on the same worker daemons; its address.
  std::string NewServer() {
    servers_.push_back(
        std::make_unique<LocalCluster>(absl::StrCat(Name(), "-ps", servers_.size())));
    EXPECT_THAT(
        servers_.back()->StartServers(1, static_cast<int>(daemons_->cluster().workers.size())),
        IsOk());
    return servers_.back()->servers().empty() ? "" : servers_.back()->servers()[0];
  }

  std::string daemons_dir_;
  std::unique_ptr<client::LocalCluster> daemons_;
  std::unique_ptr<jobs::JobClient> client_;
  std::vector<std::unique_ptr<LocalCluster>> servers_;  // from NewServer
};

TEST_F(JobTest, TrainRunsTheJobOnItsOwnClusterAndLeavesItsResults) {
  const Command c = Tessera({"train", WriteJob({.name = "train-mlp"}), "--json"});
  const std::string run = RunDir("train-mlp");
  ASSERT_EQ(c.code, 0) << c.out << c.err << Logs(run);
  ASSERT_FALSE(c.lines.empty());
  const std::string& json = c.lines.back();
  EXPECT_TRUE(absl::StartsWith(json, "{") && absl::EndsWith(json, "}")) << json;
  EXPECT_GT(JsonNumber(json, "test_accuracy"), 0.9) << json;
  EXPECT_EQ(JsonNumber(json, "epochs"), 2) << json;
  std::vector<std::string> epochs;
  for (const std::string& line : c.lines) {
    if (absl::StartsWith(line, "epoch ")) epochs.push_back(line.substr(0, line.find(' ', 6)));
  }
  EXPECT_THAT(epochs, ::testing::ElementsAre("epoch 1/2", "epoch 2/2")) << c.out;

  const std::vector<std::string> csv =
      absl::StrSplit(ReadFileToString(run + "/metrics.csv").value_or(""), '\n', absl::SkipEmpty());
  EXPECT_EQ(csv.size(), 3u) << "a header and one row per epoch";
  for (const char* file : {"plot.svg", "logs/ps-0.log", "logs/worker-0.log", "logs/worker-1.log",
                           "train-mlp-0001.params", "train-mlp-0002.params",
                           "train-mlp-final.params"}) {
    EXPECT_TRUE(fs::exists(run + "/" + file)) << file;
  }
  ExpectDaemonsGone(run, 3);
}

// A relative run_dir is relative to the working directory of `tessera train`, and the
// checkpoints land in it, not one run folder deeper under the embedded workers' run root
// (which is that same folder).
TEST_F(JobTest, ARelativeRunDirHoldsTheCheckpoints) {
  const std::string run = RunDir("relative-mlp");
  const fs::path relative = fs::relative(run, fs::current_path());
  ASSERT_TRUE(relative.is_relative()) << relative;
  const Command c = Tessera(
      {"train", WriteJob({.name = "relative-mlp", .epochs = 1, .run_dir = relative.string()})});
  ASSERT_EQ(c.code, 0) << c.out << c.err << Logs(run);
  for (const char* file : {"relative-mlp-0001.params", "relative-mlp-final.params", "metrics.csv",
                           "logs/worker-0.log"}) {
    EXPECT_TRUE(fs::exists(run + "/" + file)) << file;
  }
  EXPECT_FALSE(fs::exists(fs::path(run) / relative)) << "a run folder inside the run folder";
  ExpectDaemonsGone(run, 3);
}

TEST_F(JobTest, LaunchSizesTheClusterFromTheCommandLine) {
  const Command c = Tessera(
      {"launch", "-n", "3", "-s", "2", WriteJob({.name = "launch-mlp", .epochs = 1}), "--json"});
  const std::string run = RunDir("launch-mlp");
  ASSERT_EQ(c.code, 0) << c.out << c.err << Logs(run);
  EXPECT_THAT(c.out, HasSubstr("on 3 worker(s), 2 server(s)"));
  EXPECT_GT(JsonNumber(c.lines.back(), "test_accuracy"), 0.5) << c.out;
  for (const char* log : {"ps-0", "ps-1", "worker-0", "worker-1", "worker-2"}) {
    EXPECT_TRUE(fs::exists(absl::StrCat(run, "/logs/", log, ".log"))) << log;
  }
  // Each server's parts were also on the other, and replication never failed.
  for (int s = 0; s < 2; ++s) {
    const std::string log = ReadFileToString(absl::StrCat(run, "/logs/ps-", s, ".log")).value_or("");
    EXPECT_THAT(log, HasSubstr(absl::StrCat("backed up by unix:"))) << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("/ps-", 1 - s, ".sock"))) << log;
    EXPECT_THAT(log, Not(HasSubstr("replication to its backup"))) << log;
  }
  ExpectDaemonsGone(run, 5);
}

TEST_F(JobTest, AJobFileCanKeepOneCopyOfEachServersKeys) {
  const Command c = Tessera(
      {"train", WriteJob({.name = "one-copy", .epochs = 1, .servers = 2, .replicas = 1}), "--json"});
  const std::string run = RunDir("one-copy");
  ASSERT_EQ(c.code, 0) << c.out << c.err << Logs(run);
  for (int s = 0; s < 2; ++s) {
    const std::string log = ReadFileToString(absl::StrCat(run, "/logs/ps-", s, ".log")).value_or("");
    EXPECT_THAT(log, HasSubstr("without a backup")) << log;
  }
  ExpectDaemonsGone(run, 4);
}

TEST_F(JobTest, ALocalKVStoreJobRunsWithoutServers) {
  const Command c = Tessera({"train",
                             WriteJob({.name = "train-local",
                                       .epochs = 1,
                                       .workers = 1,
                                       .servers = 0,
                                       .kvstore = "local"}),
                             "--json"});
  const std::string run = RunDir("train-local");
  ASSERT_EQ(c.code, 0) << c.out << c.err << Logs(run);
  EXPECT_THAT(c.out, HasSubstr("on 1 worker(s), 0 server(s)"));
  EXPECT_GT(JsonNumber(c.lines.back(), "test_accuracy"), 0.5) << c.out;
  EXPECT_FALSE(fs::exists(run + "/logs/ps-0.log"));
  ExpectDaemonsGone(run, 1);
}

TEST_F(JobTest, ALocalClusterServesUnixSocketsInAFolderOnlyItsOwnerMayOpen) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  std::vector<std::string> addresses = daemons_->cluster().workers;
  addresses.push_back(daemons_->cluster().servers[0]);
  const fs::path folder = fs::path(addresses[0].substr(std::string("unix:").size())).parent_path();
  for (const std::string& address : addresses) {
    ASSERT_THAT(address, StartsWith("unix:"));
    const fs::path socket = address.substr(std::string("unix:").size());
    EXPECT_EQ(socket.parent_path(), folder) << address;
    EXPECT_TRUE(fs::is_socket(socket)) << address;
  }
  EXPECT_EQ(fs::status(folder).permissions() & fs::perms::all, fs::perms::owner_all);
  client_.reset();
  daemons_.reset();
  EXPECT_FALSE(fs::exists(folder)) << folder;
}

TEST_F(JobTest, SubmitRunsJobsOnRunningDaemonsAndStatusReportsThem) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  const std::string workers = absl::StrJoin(daemons_->cluster().workers, ",");
  const std::string job = WriteJob({.name = "submit-mlp"});
  // The daemons belong to whoever holds their cluster's token.
  const Command stranger =
      Tessera({"submit", "--workers", workers, "--servers", daemons_->cluster().servers[0], job});
  EXPECT_EQ(stranger.code, 1);
  EXPECT_THAT(stranger.err, HasSubstr("UNAUTHENTICATED: coordinator (worker 0, "));
  EXPECT_THAT(stranger.err, HasSubstr("no cluster token"));
  const Command nosy = Tessera({"status", "--workers", workers});
  EXPECT_EQ(nosy.code, 1);
  EXPECT_THAT(nosy.err, HasSubstr("no cluster token"));

  const std::string token = daemons_->token_file();
  for (int round = 0; round < 2; ++round) {
    const std::string server = round == 0 ? daemons_->cluster().servers[0] : NewServer();
    const Command c = Tessera({"submit", "--workers", workers, "--servers", server, job, "--json",
                               "--token_file", token});
    ASSERT_EQ(c.code, 0) << "round " << round << ": " << c.out << c.err;
    EXPECT_GT(JsonNumber(c.lines.back(), "test_accuracy"), 0.9) << c.out;

    const Command status = Tessera({"status", "--workers", workers, "--token_file", token});
    ASSERT_EQ(status.code, 0) << status.err;
    ASSERT_EQ(status.lines.size(), 2u) << status.out;
    for (int w = 0; w < 2; ++w) {
      EXPECT_THAT(status.lines[w], AllOf(HasSubstr(absl::StrCat("worker ", w)), HasSubstr("idle"),
                                         HasSubstr("'submit-mlp'"), HasSubstr("last result: OK")));
    }
    EXPECT_THAT(daemons_->CheckAlive(), IsOk());
  }
  EXPECT_TRUE(fs::exists(RunDir("submit-mlp") + "/submit-mlp-0002.params"));
}

// The pid of the process whose command line holds `part` (-1: none): how a test finds a
// daemon that `tessera train` started.
int PidWithArgument(const std::string& part) {
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::string cmdline = ReadFileToString(entry.path().string() + "/cmdline").value_or("");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(part) != std::string::npos) return pid;
  }
  return -1;
}

// The newest complete checkpoint's folder name in `dir` ("" when none).
std::string NewestCheckpointName(const std::string& dir) {
  std::string newest;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (fs::exists(entry.path() / "MANIFEST") && name > newest) newest = name;
  }
  return newest;
}

// Waits (up to kJobTimeout) for a complete checkpoint in `dir` newer than `than`; its name.
std::string AwaitNewerCheckpoint(const std::string& dir, const std::string& than) {
  for (const absl::Time deadline = absl::Now() + kJobTimeout; absl::Now() < deadline;) {
    if (const std::string newest = NewestCheckpointName(dir); newest > than) return newest;
    absl::SleepFor(absl::Milliseconds(2));
  }
  ADD_FAILURE() << "no checkpoint in " << dir << " newer than '" << than << "' within "
                << kJobTimeout;
  return std::string();
}

// A dist_sync job of `tessera train` (its own cluster, supervised) that does not replace
// lost workers loses its parameter server and then a worker to SIGKILL mid-run: each comes
// back and the job resumes from its newest checkpoint. Then the client is SIGKILLed (its daemons stop with it) and
// `tessera train --resume` continues. The job ends with the parameters of the same job run
// without a fault, byte for byte; metrics.csv holds every epoch once. The kills wait for conditions (a checkpoint
// written, then a newer one), not for time: the job checkpoints after every batch, so it
// cannot outrun the polling.
TEST_F(JobTest, AJobThatLosesItsServerAWorkerAndItsClientResumesAndEndsBitIdentical) {
  // Workers not replaced: the rollback path is what this test checks.
  const std::string policy =
      "checkpoint: {every_batches: 1, keep: 2}\nrecovery: {replace_workers: false}\n";
  const Command whole = Tessera(
      {"train", WriteJob({.name = "recover", .epochs = 3, .extra = policy, .run_dir = RunDir("whole")}),
       "--json"});
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::string run = RunDir("faulted");
  const std::string job = WriteJob({.name = "recover", .epochs = 3, .extra = policy, .run_dir = run});
  const std::string out = TmpDir() + "/faulted.out";
  auto train = Subprocess::Start({.argv = {RunfilePath("client/tessera"), "train", job, "--json"},
                                  .stdout_path = out,
                                  .stderr_path = out});
  ASSERT_THAT(train.status(), IsOk());
  const std::string checkpoints = run + "/recover-checkpoints";
  const std::string first = AwaitNewerCheckpoint(checkpoints, "");
  const int ps = PidWithArgument(run + "/logs/ps-0.port");
  ASSERT_GT(ps, 0);
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  // Once the first run is over (the runner says it restarts), the rerun writes past the
  // checkpoint it resumed from.
  for (const absl::Time deadline = absl::Now() + kJobTimeout;
       absl::Now() < deadline &&
       !absl::StrContains(ReadFileToString(out).value_or(""), "restart 1,");) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  AwaitNewerCheckpoint(checkpoints, NewestCheckpointName(checkpoints));
  const int worker = PidWithArgument(run + "/logs/worker-1.port");
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  for (const absl::Time deadline = absl::Now() + kJobTimeout;
       absl::Now() < deadline &&
       !absl::StrContains(ReadFileToString(out).value_or(""), "restart 2,");) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  AwaitNewerCheckpoint(checkpoints, NewestCheckpointName(checkpoints));
  // Then the client itself: its daemons stop with it, and --resume continues the job.
  const int server_now = PidWithArgument(run + "/logs/ps-0.port");
  ASSERT_GT(server_now, 0);
  ASSERT_EQ((*train)->Signal(SIGKILL).code(), absl::StatusCode::kOk);
  ASSERT_THAT((*train)->Wait(absl::Seconds(30)).status(), IsOk());
  for (const absl::Time deadline = absl::Now() + absl::Seconds(30);
       absl::Now() < deadline && kill(server_now, 0) == 0;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_NE(kill(server_now, 0), 0) << "the killed client's server lives on, orphaned";
  const std::string said = ReadFileToString(out).value_or("");
  EXPECT_THAT(said, AllOf(HasSubstr("restart 1, from its newest complete checkpoint"),
                          HasSubstr("restart 2, from its newest complete checkpoint")));
  const Command resumed = Tessera({"train", job, "--resume", "--json"});
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(ReadFileToString(run + "/recover-final.params").value_or("faulted"),
            ReadFileToString(RunDir("whole") + "/recover-final.params").value_or("whole"));
  // Every epoch once, in order.
  const std::string csv = ReadFileToString(run + "/metrics.csv").value_or("");
  const std::vector<std::string> rows = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 4u) << csv;  // the header and 3 epochs
  for (int epoch = 1; epoch <= 3; ++epoch) EXPECT_TRUE(absl::StartsWith(rows[epoch], absl::StrCat(epoch, ",")));
  // keep: 2 - and no folder a kill left incomplete outlives a later checkpoint.
  int folders = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoints)) {
    ++folders;
    EXPECT_TRUE(fs::exists(entry.path() / "MANIFEST")) << entry.path();
  }
  EXPECT_EQ(folders, 2);
  EXPECT_FALSE(first.empty());
}

// A dist_sync job of `tessera train` (its own cluster, supervised) loses worker 1, then
// worker 0 (which writes the checkpoints) to SIGKILL mid-run: each daemon comes back and its
// replacement rejoins the run at the round it was lost in - the other waits at the server -
// so there is no rerun and no rollback, and the job ends with the parameters of the same job
// run without a fault, byte for byte (no batch skipped or trained twice); metrics.csv holds
// every epoch once. The kills wait for checkpoints (conditions, not times).
// `symbol_file`: the network (empty: the MLP).
void KillWorkersAndCompare(const std::string& name, const std::string& symbol_file) {
  const std::string policy = "checkpoint: {every_batches: 1, keep: 2}\n";
  const Command whole = Tessera({"train",
                                 WriteJob({.name = name, .symbol_file = symbol_file, .epochs = 3,
                                           .extra = policy, .run_dir = RunDir(name + "-whole")}),
                                 "--json"});
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::string run = RunDir(name + "-faulted");
  const std::string job = WriteJob(
      {.name = name, .symbol_file = symbol_file, .epochs = 3, .extra = policy, .run_dir = run});
  const std::string out = TmpDir() + "/" + name + ".out";
  auto train = Subprocess::Start({.argv = {RunfilePath("client/tessera"), "train", job, "--json"},
                                  .stdout_path = out,
                                  .stderr_path = out});
  ASSERT_THAT(train.status(), IsOk());
  const std::string checkpoints = run + "/" + name + "-checkpoints";
  // Waits until the client said `times` times that a replacement rejoins the run.
  auto replaced = [&](int times) {
    for (const absl::Time deadline = absl::Now() + kJobTimeout; absl::Now() < deadline;) {
      const std::vector<std::string> lines =
          absl::StrSplit(ReadFileToString(out).value_or(""), "its replacement rejoins the run");
      if (static_cast<int>(lines.size()) > times) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "the client did not report replacement " << times << " within " << kJobTimeout;
    return false;
  };
  int replacements = 0;
  for (const int rank : {1, 0}) {
    AwaitNewerCheckpoint(checkpoints, NewestCheckpointName(checkpoints));
    const int worker = PidWithArgument(absl::StrCat(run, "/logs/worker-", rank, ".port"));
    ASSERT_GT(worker, 0);
    ASSERT_EQ(kill(worker, SIGKILL), 0);
    ASSERT_TRUE(replaced(++replacements)) << Logs(run);
  }
  absl::StatusOr<ExitStatus> exit = (*train)->Wait(kJobTimeout);
  ASSERT_THAT(exit.status(), IsOk());
  const std::string text = ReadFileToString(out).value_or("");
  EXPECT_TRUE(exit->exited && exit->code == 0) << text << Logs(run);
  EXPECT_THAT(text, AllOf(Not(HasSubstr("restart 1,")),
                          HasSubstr(absl::StrCat("job '", name, "': worker 1 (unix:")),
                          HasSubstr(absl::StrCat("job '", name, "': worker 0 (unix:"))));
  // Compared whole, not printed: they are binary.
  EXPECT_TRUE(ReadFileToString(absl::StrCat(run, "/", name, "-final.params")).value_or("faulted") ==
              ReadFileToString(absl::StrCat(RunDir(name + "-whole"), "/", name, "-final.params"))
                  .value_or("whole"))
      << "the final parameters (auxiliary states included) differ from the run without faults";
  const std::string replaced_log = ReadFileToString(run + "/logs/worker-0.log").value_or("");
  EXPECT_THAT(replaced_log, HasSubstr("worker 0 rejoins its job after"));
  EXPECT_THAT(replaced_log, Not(HasSubstr("auxiliary states start from")));
  if (!symbol_file.empty()) {
    EXPECT_THAT(replaced_log, HasSubstr("continues its predecessor's auxiliary states"));
  }
  const std::string csv = ReadFileToString(run + "/metrics.csv").value_or("");
  const std::vector<std::string> rows = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 4u) << csv;  // the header and 3 epochs
  for (int epoch = 1; epoch <= 3; ++epoch) EXPECT_TRUE(absl::StartsWith(rows[epoch], absl::StrCat(epoch, ",")));
}

TEST_F(JobTest, KilledWorkersAreReplacedAndTheJobEndsBitIdenticalWithoutARerun) {
  KillWorkersAndCompare("replace", "");
}

// Gradient compression (compression_params: MXNet's 2bit, and fp16; 2bit with the pulls in
// bfloat16) trains to within half a point of the same job uncompressed: the digits MLP, and
// LeNet on MNIST where ./tessera test fetched it. Plain SGD: with momentum 0.9 on the
// servers, 2-bit steps compound (README, "Parameter servers").
TEST_F(JobTest, CompressedTransfersTrainWithinHalfAPointOfFloat32) {
  struct Case {
    std::string name, model, mnist_dir;
    int epochs;
  };
  std::vector<Case> cases = {{"digits-mlp", "mlp", "", 2}};
  if (const char* mnist = std::getenv("TESSERA_MNIST_DIR")) cases.push_back({"mnist-lenet", "lenet", mnist, 3});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // float32, then each compression: its job line, and what the server's log says.
    const std::vector<std::array<std::string, 3>> runs = {
        {"float32", "", ""},
        {"2bit", "compression_params: {type: 2bit, threshold: 0.5}\n", "pushes 2bit (threshold 0.5)\n"},
        {"fp16", "compression_params: {type: fp16}\n", "pushes fp16\n"},
        {"2bit-bf16", "compression_params: {type: 2bit, threshold: 0.5, pull_type: bf16}\n",
         "pushes 2bit (threshold 0.5) with bf16 pulls\n"}};
    std::vector<double> accuracy;
    for (const auto& [type, line, said] : runs) {
      const std::string name = absl::StrCat(c.name, "-", type);
      const Command run = Tessera(
          {"train",
           WriteJob({.name = name, .model = c.model, .epochs = c.epochs,
                     .optimizer = "{name: sgd, params: {learning_rate: 0.1}}", .mnist_dir = c.mnist_dir,
                     .flat = c.model == "mlp", .extra = line}),
           "--json"});
      ASSERT_EQ(run.code, 0) << run.out << run.err << Logs(RunDir(name));
      accuracy.push_back(JsonNumber(run.lines.back(), "test_accuracy"));
      const std::string log = ReadFileToString(RunDir(name) + "/logs/ps-0.log").value_or("");
      EXPECT_EQ(log.find("' pushes ") != std::string::npos, !said.empty()) << type;
      if (!said.empty()) {
        EXPECT_THAT(log, HasSubstr(said));
      }
    }
    std::printf("%s: test accuracy float32 %.4f, 2bit %.4f, fp16 %.4f, 2bit with bf16 pulls %.4f\n",
                c.name.c_str(), accuracy[0], accuracy[1], accuracy[2], accuracy[3]);
    EXPECT_GT(accuracy[0], 0.85);
    EXPECT_NEAR(accuracy[1], accuracy[0], 0.005) << "2bit against float32";
    EXPECT_NEAR(accuracy[2], accuracy[0], 0.005) << "fp16 against float32";
    EXPECT_NEAR(accuracy[3], accuracy[0], 0.005) << "2bit with bf16 pulls against float32";
  }
}

// The same with BatchNorm, whose running statistics are no key's: each worker stashes them
// with the servers every batch, and rank 0's replacement (whose are saved) starts from its
// predecessor's, so the saved auxiliary states are byte-identical too.
TEST_F(JobTest, AReplacedWorkerContinuesItsBatchNormStatistics) {
  graph::Symbol x = graph::Symbol::Variable("data");
  ASSERT_OK_AND_ASSIGN(x, graph::Symbol::Create("FullyConnected", {{"num_hidden", "32"}}, {x}, "fc1"));
  ASSERT_OK_AND_ASSIGN(x, graph::Symbol::Create("BatchNorm", {{"fix_gamma", "false"}, {"momentum", "0.9"}},
                                                {x}, "bn1"));
  ASSERT_OK_AND_ASSIGN(x, graph::Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu1"));
  ASSERT_OK_AND_ASSIGN(x, graph::Symbol::Create("FullyConnected", {{"num_hidden", "10"}}, {x}, "fc2"));
  ASSERT_OK_AND_ASSIGN(x, graph::Symbol::Create("SoftmaxOutput", {}, {x}, "softmax"));
  const std::string symbol = TmpDir() + "/bn-mlp-symbol.json";
  ASSERT_OK(graph::SaveSymbolFile(x, symbol));
  KillWorkersAndCompare("replace-bn", symbol);
}

// With two replicated servers, a SIGKILLed parameter server is failed over, not restarted
// from a checkpoint: its backup takes its keys over, the workers send again what it left
// unanswered, and the job goes on without a rerun to the parameters of the same job run
// without a fault, byte for byte. The kill waits for a checkpoint (a condition, not a time).
TEST_F(JobTest, AKilledParameterServerFailsOverAndTheJobEndsBitIdenticalWithoutARerun) {
  const std::string policy = "checkpoint: {every_batches: 1, keep: 2}\n";
  const Command whole = Tessera({"train",
                                 WriteJob({.name = "failover", .epochs = 2, .servers = 2,
                                           .extra = policy, .run_dir = RunDir("failover-whole")}),
                                 "--json"});
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::string run = RunDir("failover-faulted");
  const std::string job =
      WriteJob({.name = "failover", .epochs = 2, .servers = 2, .extra = policy, .run_dir = run});
  const std::string out = TmpDir() + "/failover.out";
  auto train = Subprocess::Start({.argv = {RunfilePath("client/tessera"), "train", job, "--json"},
                                  .stdout_path = out,
                                  .stderr_path = out});
  ASSERT_THAT(train.status(), IsOk());
  const std::string checkpoints = run + "/failover-checkpoints";
  for (const absl::Time deadline = absl::Now() + kJobTimeout;
       absl::Now() < deadline && NewestCheckpointName(checkpoints).empty();) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const int ps = PidWithArgument(run + "/logs/ps-0.port");
  ASSERT_GT(ps, 0);
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  absl::StatusOr<ExitStatus> exit = (*train)->Wait(kJobTimeout);
  ASSERT_THAT(exit.status(), IsOk());
  const std::string said = ReadFileToString(out).value_or("");
  EXPECT_TRUE(exit->exited && exit->code == 0) << said << Logs(run);
  EXPECT_THAT(said, Not(HasSubstr("restart 1,")));
  EXPECT_EQ(ReadFileToString(run + "/failover-final.params").value_or("faulted"),
            ReadFileToString(RunDir("failover-whole") + "/failover-final.params").value_or("whole"));
  EXPECT_THAT(ReadFileToString(run + "/logs/ps-1.log").value_or(""),
              HasSubstr("serving its keys from here on (view 1)"));
  EXPECT_THAT(ReadFileToString(run + "/logs/worker-0.log").value_or(""),
              HasSubstr("server 1 serves index 0 in view 1"));
}

// A frozen parameter server (SIGSTOP) is failed over once keepalive gives up on it (about
// 15 s), and the job ends as a run without the fault; thawed mid-job, the stale server
// serves nothing more. The freeze waits for a checkpoint, the thaw for the failover.
TEST_F(JobTest, AFrozenParameterServerIsFailedOverAndTheJobEndsBitIdentical) {
  const std::string policy = "checkpoint: {every_batches: 1, keep: 2}\n";
  const Command whole = Tessera({"train",
                                 WriteJob({.name = "frozen", .epochs = 2, .servers = 2,
                                           .extra = policy, .run_dir = RunDir("frozen-whole")}),
                                 "--json"});
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::string run = RunDir("frozen-faulted");
  const std::string job =
      WriteJob({.name = "frozen", .epochs = 2, .servers = 2, .extra = policy, .run_dir = run});
  const std::string out = TmpDir() + "/frozen.out";
  auto train = Subprocess::Start({.argv = {RunfilePath("client/tessera"), "train", job, "--json"},
                                  .stdout_path = out,
                                  .stderr_path = out});
  ASSERT_THAT(train.status(), IsOk());
  for (const absl::Time deadline = absl::Now() + kJobTimeout;
       absl::Now() < deadline && NewestCheckpointName(run + "/frozen-checkpoints").empty();) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const int ps = PidWithArgument(run + "/logs/ps-0.port");
  ASSERT_GT(ps, 0);
  ASSERT_EQ(kill(ps, SIGSTOP), 0);
  for (const absl::Time deadline = absl::Now() + kJobTimeout;
       absl::Now() < deadline &&
       !absl::StrContains(ReadFileToString(run + "/logs/worker-0.log").value_or(""),
                          "serves index 0 in view 1");) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(kill(ps, SIGCONT), 0);
  absl::StatusOr<ExitStatus> exit = (*train)->Wait(kJobTimeout);
  ASSERT_THAT(exit.status(), IsOk());
  const std::string said = ReadFileToString(out).value_or("");
  EXPECT_TRUE(exit->exited && exit->code == 0) << said << Logs(run);
  EXPECT_THAT(said, Not(HasSubstr("restart 1,")));
  EXPECT_EQ(ReadFileToString(run + "/frozen-final.params").value_or("faulted"),
            ReadFileToString(RunDir("frozen-whole") + "/frozen-final.params").value_or("whole"));
  EXPECT_THAT(ReadFileToString(run + "/logs/ps-1.log").value_or(""),
              HasSubstr("serving its keys from here on (view 1)"));
}

// `./tessera chaos --kill ps,worker,checkpoint --no-rollback`'s short version: a replicated
// job's servers and workers (worker 0 also while it writes a checkpoint) SIGKILLed at random
// batches, each restarted by the supervisor - a server brought up to date before the next
// kill, a worker's replacement rejoining the run: the job never rolls back to a checkpoint,
// and ends with the parameters of the run without faults and, on every server, the counters
// of its key parts: no round lost, none applied twice.
TEST_F(JobTest, ChaosKillingServersAndWorkersNeverRollsTheJobBack) {
  const std::string job = WriteJob(
      {.name = "chaos-ps", .epochs = 4, .servers = 2,
       .extra = "checkpoint: {every_batches: 1, keep: 2}\nrecovery: {max_restarts: 5}\n"});
  const Command c = RunCommand({"/usr/bin/python3", RunfilePath("tools/chaos.py"), job, "--kill",
                                "ps,worker,checkpoint", "--times", "4", "--no-rollback", "--seed",
                                "7", "--tessera", RunfilePath("client/tessera"), "--out",
                                TmpDir() + "/chaos-ps"});
  const std::string out = TmpDir() + "/chaos-ps";
  std::string logs;  // restarted daemons' earlier logs too (NAME.log.N)
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out + "/faulted/logs", ec)) {
    if (entry.path().string().find(".log") == std::string::npos) continue;
    absl::StrAppend(&logs, "---- ", entry.path().string(), " ----\n",
                    ReadFileToString(entry.path()).value_or(""));
  }
  ASSERT_EQ(c.code, 0) << c.out << c.err << ReadFileToString(out + "/faulted.log").value_or("")
                       << logs;
  ASSERT_FALSE(c.lines.empty()) << c.err;
  const nlohmann::json report = nlohmann::json::parse(c.lines.back());
  EXPECT_GE(report["kills"].size(), 1u) << c.lines.back();
  EXPECT_EQ(report["rollbacks"], 0);
  EXPECT_EQ(report["params_identical"], true);
  const nlohmann::json& counters = report["round_counters"];
  // The MLP's 4 arrays on 2 servers; 4 epochs of rounds on each.
  EXPECT_GE(counters["key_parts"], 4) << counters;
  EXPECT_GE(counters["rounds"], 16) << counters;
  EXPECT_EQ(counters["rounds_lost"], 0) << counters;
  EXPECT_EQ(counters["rounds_applied_twice"], 0) << counters;
  EXPECT_EQ(counters["pushes_lost"], 0) << counters;
  EXPECT_EQ(counters["pushes_applied_twice"], 0) << counters;
  EXPECT_TRUE(counters["parts_not_summing_each_push_once"].empty()) << counters;
  EXPECT_EQ(report["passed"], true);
}

// The cluster owns a submitted job: its client killed with SIGKILL changes nothing, a second
// job waits in the queue behind it, and both are listed, followed, cancelled and waited for by
// id. The first job has no end of its own (epochs without number): it runs until the test
// cancels it, whatever the machine's speed.
TEST_F(JobTest, ASubmittedJobOutlivesItsClientAndTheNextWaitsItsTurn) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  const std::string workers = absl::StrJoin(daemons_->cluster().workers, ",");
  const std::vector<std::string> reach = {"--workers", workers, "--servers",
                                          daemons_->cluster().servers[0], "--token_file",
                                          daemons_->token_file()};
  auto tessera = [&](std::vector<std::string> args) {
    args.insert(args.end(), reach.begin(), reach.end());
    return Tessera(args);
  };
  const std::string endless = WriteJob({.name = "endless", .epochs = 1'000'000});
  const std::string next = WriteJob({.name = "next", .epochs = 2});

  // A client follows the job, and is killed once the job has trained a few batches.
  const std::string out = TmpDir() + "/endless-submit.out";
  std::vector<std::string> argv = {RunfilePath("client/tessera"), "submit", endless};
  argv.insert(argv.end(), reach.begin(), reach.end());
  auto follower = Subprocess::Start({.argv = argv, .stdout_path = out, .stderr_path = out});
  ASSERT_THAT(follower.status(), IsOk());
  std::string id;
  nlohmann::json record;
  for (const absl::Time deadline = absl::Now() + kJobTimeout; absl::Now() < deadline;) {
    const Command listed = tessera({"jobs", "--json"});
    const nlohmann::json list = nlohmann::json::parse(
        listed.lines.empty() ? "{}" : listed.lines.back(), nullptr, false);
    if (!list.is_discarded() && list.contains("jobs") && !list["jobs"].empty()) {
      id = list["jobs"][0]["id"].get<std::string>();
      record = list["jobs"][0];
      if (record["state"] == "running" && BatchesDone(record) >= 5) break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_FALSE(id.empty()) << ReadFileToString(out).value_or("");
  ASSERT_EQ(record["state"], "running") << record.dump();
  EXPECT_EQ(record["name"], "endless");
  EXPECT_EQ(record["num_epochs"], 1'000'000);
  // Workers report where they are, not "epoch 0 batch 0", between batch events too.
  const Command status = tessera({"status"});
  EXPECT_THAT(status.out, AllOf(HasSubstr("running job 'endless'"), Not(HasSubstr("epoch 0 batch 0"))));
  ASSERT_THAT((*follower)->Signal(SIGKILL), IsOk());
  ASSERT_THAT((*follower)->Wait(absl::Seconds(10)).status(), IsOk());
  const int64_t at_kill = BatchesDone(record);

  // It goes on: more batches, still running, long after the client is gone.
  nlohmann::json later;
  for (const absl::Time deadline = absl::Now() + kJobTimeout; absl::Now() < deadline;) {
    later = JobRecordOf(tessera({"jobs", "--json"}), id);
    if (later.is_null() || later["state"] != "running" || BatchesDone(later) >= at_kill + 50) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_FALSE(later.is_null());
  EXPECT_EQ(later["state"], "running") << later.dump();
  EXPECT_GE(BatchesDone(later), at_kill + 50) << later.dump();

  // A second job waits its turn instead of being refused; --no-wait prints its id.
  const Command queued = tessera({"submit", next, "--no-wait"});
  ASSERT_EQ(queued.code, 0) << queued.err;
  ASSERT_EQ(queued.lines.size(), 1u) << queued.out;
  const std::string next_id = queued.lines[0];
  const nlohmann::json waiting = JobRecordOf(tessera({"jobs", "--json"}), next_id);
  ASSERT_FALSE(waiting.is_null());
  EXPECT_EQ(waiting["state"], "queued");
  EXPECT_EQ(waiting["queue_position"], 1);
  const Command table = tessera({"jobs"});
  EXPECT_THAT(table.out, AllOf(HasSubstr(id), HasSubstr("running"), HasSubstr(next_id),
                               HasSubstr("queued #1")));

  // Unknown ids are named; the cancel stops the first job and the second runs to its end.
  const Command unknown = tessera({"attach", "no-such-job"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, AllOf(HasSubstr("NOT_FOUND"), HasSubstr("no-such-job")));
  const Command cancel = tessera({"cancel", id});
  ASSERT_EQ(cancel.code, 0) << cancel.err;
  EXPECT_THAT(cancel.out, HasSubstr("stops at its next batch"));
  const Command waited = tessera({"wait", next_id});
  EXPECT_EQ(waited.code, 0) << waited.out << waited.err;
  EXPECT_THAT(waited.out, HasSubstr(absl::StrCat("job ", next_id, " succeeded")));
  const Command first = tessera({"wait", id});
  EXPECT_EQ(first.code, 1);
  EXPECT_THAT(first.out, HasSubstr(absl::StrCat("job ", id, " cancelled")));
  const nlohmann::json done = JobRecordOf(tessera({"jobs", "--json"}), next_id);
  ASSERT_FALSE(done.is_null());
  EXPECT_GT(done["eval"]["accuracy"].get<double>(), 0.9) << done.dump();

  // attach replays a finished job's epochs.
  const Command attached = tessera({"attach", next_id});
  EXPECT_EQ(attached.code, 0) << attached.err;
  EXPECT_THAT(attached.out, AllOf(HasSubstr("epoch 1/2"), HasSubstr("epoch 2/2"),
                                  HasSubstr("succeeded  test: accuracy")));
  EXPECT_THAT(daemons_->CheckAlive(), IsOk());
}

TEST_F(JobTest, CancelStopsTheJobAndTheDaemonsTakeTheNext) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  const absl::StatusOr<jobs::JobOutcome> cancelled =
      RunJob(Spec({.name = "cancel-mlp", .epochs = 1000}), nullptr, [&] { client_->Cancel(); });
  EXPECT_THAT(cancelled, StatusIs(absl::StatusCode::kCancelled));

  absl::StatusOr<std::vector<WorkerStatus>> statuses = client_->Status();
  ASSERT_THAT(statuses.status(), IsOk());
  for (const WorkerStatus& s : *statuses) {
    EXPECT_EQ(s.state(), WorkerStatus::IDLE);
    EXPECT_THAT(s.last_result(), HasSubstr("CANCELLED"));
  }
  auto next_client = jobs::JobClient::Connect({.workers = daemons_->cluster().workers,
                                                 .servers = {NewServer()},
                                                 .security = daemons_->cluster().security},
                                                absl::Seconds(30));
  ASSERT_THAT(next_client.status(), IsOk());
  const absl::StatusOr<jobs::JobOutcome> next =
      RunJob(Spec({.name = "after-cancel", .epochs = 1}), next_client->get());
  ASSERT_THAT(next.status(), IsOk());
  EXPECT_GT(next->eval.at("accuracy"), 0.5);
  EXPECT_THAT(daemons_->CheckAlive(), IsOk());
}

TEST_F(JobTest, BadJobsAreRefusedNamingTheProblemAndTheDaemonsKeepServing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  const JobSpec good = Spec({.name = "bad-input", .epochs = 1});
  auto expect_refused = [&](const JobSpec& spec, absl::StatusCode code, const std::string& what,
                            jobs::JobClient* client = nullptr) {
    EXPECT_THAT(RunJob(spec, client), StatusIs(code, AllOf(HasSubstr("worker "), HasSubstr(what))));
  };
  JobSpec spec = good;
  spec.set_symbol_json(R"({"nodes":[{"op":"null","name":"data","inputs":[]},
      {"op":"Frobnicate","name":"f1","inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]})");
  expect_refused(spec, absl::StatusCode::kNotFound, "Frobnicate");
  spec.set_symbol_json(R"({"nodes":[{"op":"null","name":"data","inputs":[]},
      {"op":"Activation","name":"relu1","attrs":{"act_type":"relu"},"inputs":[[5,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]})");
  expect_refused(spec, absl::StatusCode::kInvalidArgument, "relu1");
  spec = good;
  spec.set_model("lenet");  // LeNet on flat (batch, 784) rows
  expect_refused(spec, absl::StatusCode::kInvalidArgument, "network: node 'conv1'");
  spec = good;
  spec.mutable_data()->set_train_images(DataDir() + "/missing-images");
  expect_refused(spec, absl::StatusCode::kNotFound, "missing-images");
  // Files outside the workers' roots: read nothing, write nothing.
  spec = good;
  spec.mutable_data()->set_kind("csv");
  spec.mutable_data()->clear_train_images();
  (*spec.mutable_data()->mutable_train_iter())["data_csv"] = "/etc/passwd";
  (*spec.mutable_data()->mutable_train_iter())["data_shape"] = "(1)";
  expect_refused(spec, absl::StatusCode::kPermissionDenied,
                 "data.train_iter.data_csv: '/etc/passwd' leads outside this worker's data root");
  spec = good;
  std::string up = DataDir();
  for (int i = 0; i < 40; ++i) up += "/..";  // past "/", wherever the test runs
  spec.mutable_data()->set_train_images(up + "/etc/passwd");
  expect_refused(spec, absl::StatusCode::kPermissionDenied, "data.train_images");
  spec = good;
  const std::string outside = TmpDir() + "/escaped";
  spec.set_checkpoint_prefix(outside);
  expect_refused(spec, absl::StatusCode::kPermissionDenied, "checkpoint_prefix");
  EXPECT_FALSE(fs::exists(outside + "-0001.params"));
  spec = good;
  spec.set_optimizer("sgdd");
  // Local: a dist store would connect to the server before the optimizer is checked, and
  // the server keeps the departed workers, which the valid job below must not meet.
  spec.set_kvstore("local");
  expect_refused(spec, absl::StatusCode::kInvalidArgument, "sgdd");
  // dist_sync on workers told of no parameter servers.
  auto no_servers = jobs::JobClient::Connect(
      {.workers = daemons_->cluster().workers, .security = daemons_->cluster().security},
      absl::Seconds(30));
  ASSERT_THAT(no_servers.status(), IsOk());
  expect_refused(good, absl::StatusCode::kFailedPrecondition, "ps_hosts", no_servers->get());

  const absl::StatusOr<jobs::JobOutcome> ok = RunJob(good);
  ASSERT_THAT(ok.status(), IsOk());
  EXPECT_GT(ok->eval.at("accuracy"), 0.5);
  EXPECT_THAT(daemons_->CheckAlive(), IsOk());
}

// A server starts afresh for every job (Hello.job_id): before it did, a second job started
// from the first one's weights and failed about one run in three ("dist_sync round 65 of key
// 5 cannot complete: worker 1 left server 0"), or after a cancelled job left a round half
// pushed.
TEST_F(JobTest, ServersTakeJobAfterJob) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(RunJob(Spec({.name = "again", .epochs = 1})).status(), IsOk()) << "job " << i;
  }
  EXPECT_THAT(RunJob(Spec({.name = "again", .epochs = 1000}), nullptr, [&] { client_->Cancel(); }),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(RunJob(Spec({.name = "again", .epochs = 1})).status(), IsOk()) << "after the cancel";
}

TEST_F(JobTest, TrainRejectsAMisspelledFieldBeforeStartingAnything) {
  const Command c = Tessera({"train", WriteJob({.name = "typo", .extra = "epochz: 3\n"})});
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.err, AllOf(HasSubstr("epochz"), HasSubstr("epochs")));
  EXPECT_FALSE(fs::exists(RunDir("typo") + "/logs")) << "no daemon started";
}

TEST_F(JobTest, AKilledWorkerFailsTheJobNamingItAndTheOthersSurvive) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons(2, 1));
  const std::vector<int> pids = daemons_->pids();  // ps-0, worker-0, worker-1
  ASSERT_EQ(pids.size(), 3u);
  absl::Time killed = absl::Now();
  // These daemons have no supervisor: the killed worker is not replaced within the wait.
  JobSpec spec = Spec({.name = "killed", .epochs = 1000});
  spec.mutable_recovery()->set_wait_seconds(3);
  const absl::StatusOr<jobs::JobOutcome> result =
      RunJob(spec, nullptr, [&] {
        killed = absl::Now();
        ASSERT_EQ(kill(pids[2], SIGKILL), 0);
      });
  const absl::Duration took = absl::Now() - killed;
  EXPECT_LT(took, absl::Seconds(30));
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable,
                               AllOf(HasSubstr("worker 1"), HasSubstr("was not replaced within 3s"))));
  // CheckAlive names the first daemon that exited, in the order ps-0, worker-0, worker-1. The
  // client can see the killed worker's sockets close before the kernel has reaped it.
  absl::Status alive = daemons_->CheckAlive();
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       alive.ok() && absl::Now() < deadline; alive = daemons_->CheckAlive()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(alive,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("worker-1 exited (killed by signal 9)"),
                             Not(HasSubstr("ps-0")), Not(HasSubstr("worker-0")))));
  EXPECT_TRUE(fs::exists(RunDir("killed") + "/killed-0001.params"));
  std::fprintf(stderr, "the client saw the killed worker after %s: %s\n",
               absl::FormatDuration(took).c_str(), result.status().ToString().c_str());
}

TEST(SecureDaemonTest, DaemonsRefuseToServeBeyondLoopbackWithoutTlsAndAToken) {
  const std::vector<std::vector<std::string>> daemons = {
      {RunfilePath("worker/tessera-worker"), "--address=0.0.0.0:0"},
      {RunfilePath("server/tessera-ps"), "--address=0.0.0.0:0", "--index=0", "--num_servers=1",
       "--num_workers=1"}};
  for (const std::vector<std::string>& argv : daemons) {
    SCOPED_TRACE(argv[0]);
    const std::string err = TmpDir() + "/refused.err";
    auto p = Subprocess::Start({.argv = argv, .stderr_path = err});
    ASSERT_THAT(p.status(), IsOk());
    absl::StatusOr<ExitStatus> exit = (*p)->Wait(absl::Seconds(30));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_TRUE(exit->exited && exit->code == 1) << exit->ToString();
    const std::string message = ReadFileToString(err).value_or("");
    EXPECT_THAT(message, HasSubstr("will not serve 0.0.0.0:0"));
    EXPECT_THAT(message, HasSubstr("tessera certs DIR --hosts"));

    // --insecure serves, with a warning in the log.
    std::vector<std::string> insecure = argv;
    insecure.push_back("--insecure");
    Daemon d = StartDaemon("insecure", insecure);
    ASSERT_FALSE(d.address.empty());
    EXPECT_THAT(ReadFileToString(d.log).value_or(""), HasSubstr("plaintext without token checks"));
  }
}

// One tessera-ps and two tessera-worker processes on loopback, their logs named after
// `name`, and a client connected to them.
struct LoopbackCluster {
  Daemon ps, w0, w1;
  std::unique_ptr<jobs::JobClient> client;
};

void StartLoopbackCluster(const std::string& name, LoopbackCluster* c) {
  const std::vector<std::string> roots = {"--data_root=" + DataDir(),
                                          "--run_root=" + TmpDir() + "/runs"};
  c->ps = StartDaemon(name + "-ps", {RunfilePath("server/tessera-ps"), "--address=127.0.0.1:0",
                                     "--index=0", "--num_servers=1", "--num_workers=2"});
  c->w0 = StartDaemon(name + "-w0", {RunfilePath("worker/tessera-worker"), "--address=127.0.0.1:0",
                                     roots[0], roots[1]});
  c->w1 = StartDaemon(name + "-w1", {RunfilePath("worker/tessera-worker"), "--address=127.0.0.1:0",
                                     roots[0], roots[1]});
  ASSERT_FALSE(c->ps.address.empty() || c->w0.address.empty() || c->w1.address.empty());
  auto client = jobs::JobClient::Connect(
      {.workers = {c->w0.address, c->w1.address}, .servers = {c->ps.address}}, absl::Seconds(30));
  ASSERT_THAT(client.status(), IsOk());
  c->client = std::move(*client);
}

// The issue's case: a worker whose parameter server froze (SIGSTOP) took 24 s to honour
// SIGTERM (until keepalive gave up), and would never have with a server that keeps its
// stream alive. Kubernetes waits terminationGracePeriodSeconds, then kills.
TEST_F(JobTest, SigtermStopsAWorkerWaitingOnAFrozenServerWithinTenSeconds) {
  LoopbackCluster c;
  ASSERT_NO_FATAL_FAILURE(StartLoopbackCluster("frozen", &c));
  Daemon &ps = c.ps, &w0 = c.w0, &w1 = c.w1;
  absl::Duration took = absl::InfiniteDuration();
  absl::StatusOr<ExitStatus> exit = absl::UnknownError("not stopped");
  const absl::StatusOr<jobs::JobOutcome> outcome =
      RunJob(Spec({.name = "frozen-ps", .epochs = 1000}), c.client.get(), [&] {
        ASSERT_THAT(ps.process->Signal(SIGSTOP), IsOk());
        absl::SleepFor(absl::Milliseconds(300));  // the workers are now waiting on it
        const absl::Time start = absl::Now();
        ASSERT_THAT(w0.process->Signal(SIGTERM), IsOk());
        exit = w0.process->Wait(absl::Seconds(20));
        took = absl::Now() - start;
        (void)ps.process->Signal(SIGCONT);
        (void)w1.process->Signal(SIGTERM);
      });
  EXPECT_FALSE(outcome.ok());
  ASSERT_THAT(exit.status(), IsOk()) << ReadFileToString(w0.log).value_or("");
  EXPECT_TRUE(exit->exited && exit->code == 0) << exit->ToString();
  EXPECT_LT(took, absl::Seconds(10)) << ReadFileToString(w0.log).value_or("");
  EXPECT_THAT(ReadFileToString(w0.log).value_or(""), HasSubstr("tessera-worker stopped"));
}

// The server's side: with one worker frozen mid-job (its stream open, its round never
// complete) and the other waiting in that round, SIGINT (as SIGTERM) stops tessera-ps within
// 10 s with exit code 0, and the waiting worker's job fails instead of hanging.
TEST_F(JobTest, SigintStopsAParameterServerWithWorkersWaitingInARound) {
  LoopbackCluster c;
  ASSERT_NO_FATAL_FAILURE(StartLoopbackCluster("stopping", &c));
  Daemon &ps = c.ps, &w1 = c.w1;
  absl::Duration took = absl::InfiniteDuration();
  absl::StatusOr<ExitStatus> exit = absl::UnknownError("not stopped");
  const absl::StatusOr<jobs::JobOutcome> outcome =
      RunJob(Spec({.name = "stopping-ps", .epochs = 1000}), c.client.get(), [&] {
        ASSERT_THAT(w1.process->Signal(SIGSTOP), IsOk());
        absl::SleepFor(absl::Milliseconds(300));  // worker 0 now waits on worker 1's pushes
        const absl::Time start = absl::Now();
        ASSERT_THAT(ps.process->Signal(SIGINT), IsOk());
        exit = ps.process->Wait(absl::Seconds(20));
        took = absl::Now() - start;
        (void)w1.process->Signal(SIGCONT);
      });
  EXPECT_FALSE(outcome.ok());
  ASSERT_THAT(exit.status(), IsOk()) << ReadFileToString(ps.log).value_or("");
  EXPECT_TRUE(exit->exited && exit->code == 0) << exit->ToString();
  EXPECT_LT(took, absl::Seconds(10)) << ReadFileToString(ps.log).value_or("");
  EXPECT_THAT(ReadFileToString(ps.log).value_or(""), HasSubstr("tessera-ps 0 stopped"));
}

TEST_F(JobTest, ATlsClusterTrainsWithItsTokenAndRefusesStrangers) {
  const std::string certs = TmpDir() + "/certs";
  fs::remove_all(certs);
  const Command made = Tessera({"certs", certs, "--hosts", "127.0.0.1"});
  ASSERT_EQ(made.code, 0) << made.err;
  const Command other_ca = Tessera({"certs", certs + "/other", "--hosts", "127.0.0.1"});
  ASSERT_EQ(other_ca.code, 0) << other_ca.err;
  const std::string tls = certs + "/127.0.0.1";
  const std::string token = TmpDir() + "/token";
  const std::string wrong_token = TmpDir() + "/wrong-token";
  ASSERT_THAT(WriteStringToFile(token, "correct horse battery staple\n", kOwnerOnly), IsOk());
  ASSERT_THAT(WriteStringToFile(wrong_token, "correct horse battery stapler\n"), IsOk());
  // Every interface, mutual TLS: the workers present their certificate to the server.
  const std::vector<std::string> secure = {"--address=0.0.0.0:0", "--tls_dir=" + tls,
                                           "--token_file=" + token, "--mtls"};
  const std::vector<std::string> roots = {"--data_root=" + DataDir(),
                                          "--run_root=" + TmpDir() + "/runs"};
  auto with = [&](std::vector<std::string> argv) {
    argv.insert(argv.end(), secure.begin(), secure.end());
    return argv;
  };
  Daemon ps = StartDaemon("tls-ps", with({RunfilePath("server/tessera-ps"), "--index=0",
                                          "--num_servers=1", "--num_workers=2"}));
  Daemon w0 =
      StartDaemon("tls-worker-0", with({RunfilePath("worker/tessera-worker"), roots[0], roots[1]}));
  Daemon w1 =
      StartDaemon("tls-worker-1", with({RunfilePath("worker/tessera-worker"), roots[0], roots[1]}));
  ASSERT_FALSE(ps.address.empty() || w0.address.empty() || w1.address.empty());
  const std::string workers = absl::StrCat(w0.address, ",", w1.address);
  const std::string job = WriteJob({.name = "tls-mlp", .epochs = 1});
  auto submit = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"submit", "--workers", workers, "--servers", ps.address, job};
    args.insert(args.end(), flags.begin(), flags.end());
    return Tessera(args);
  };

  const Command plaintext = submit({"--token_file", token});
  EXPECT_EQ(plaintext.code, 1);
  EXPECT_THAT(plaintext.err, HasSubstr("does one end use TLS (--tls_dir) and the other not?"));
  const Command wrong = submit({"--tls_dir", tls, "--token_file", wrong_token});
  EXPECT_EQ(wrong.code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("wrong cluster token"));
  const Command stranger = submit({"--tls_dir", certs + "/other/127.0.0.1", "--token_file", token});
  EXPECT_EQ(stranger.code, 1);
  EXPECT_THAT(stranger.err, HasSubstr("certificate verify failed"));

  const Command ok = submit({"--tls_dir", tls, "--token_file", token, "--json"});
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err << ReadFileToString(ps.log).value_or("")
                        << ReadFileToString(w0.log).value_or("");
  EXPECT_GT(JsonNumber(ok.lines.back(), "test_accuracy"), 0.9) << ok.out;
  for (Daemon* d : {&ps, &w0, &w1}) EXPECT_TRUE(d->process->running()) << d->log;
  EXPECT_THAT(ReadFileToString(w0.log).value_or(""), Not(HasSubstr("correct horse")));
}

// Hosts of their own: network namespaces joined by a bridge (ip netns + veth), one daemon
// per namespace on its own address, so every connection crosses a (virtual) network as it
// would between machines. Needs CAP_NET_ADMIN (root); skipped with the reason otherwise.
class Network {
 public:
  // Runs `ip ARGS...`; the error carries its stderr.
  static absl::Status Ip(const std::vector<std::string>& args) {
    const std::string err = TmpDir() + "/ip.err";
    std::vector<std::string> argv = {"ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Subprocess::Start({.argv = argv, .stdout_path = "/dev/null", .stderr_path = err});
    if (!p.ok()) return p.status();
    absl::StatusOr<ExitStatus> exit = (*p)->Wait(absl::Seconds(30));
    if (!exit.ok()) return exit.status();
    if (!exit->exited || exit->code != 0) {
      return absl::InternalError(absl::StrCat("ip ", absl::StrJoin(args, " "), ": ",
                                              exit->ToString(), ": ",
                                              ReadFileToString(err).value_or("")));
    }
    return absl::OkStatus();
  }

  // Namespaces "<prefix>-<host>" with addresses 10.213.47.<i+1>/24, in the order given, on
  // one bridge in a namespace of its own (the machine's own network is never touched).
  absl::Status Create(const std::vector<std::string>& hosts) {
    prefix_ = absl::StrCat("tsr", getpid());
    hub_ = prefix_ + "-hub";
    RETURN_IF_ERROR(AddNamespace(hub_));
    RETURN_IF_ERROR(Ip({"-n", hub_, "link", "add", "br0", "type", "bridge"}));
    RETURN_IF_ERROR(Ip({"-n", hub_, "link", "set", "br0", "up"}));
    for (size_t i = 0; i < hosts.size(); ++i) {
      const std::string ns = Namespace(hosts[i]);
      const std::string port = absl::StrCat("p", i);
      RETURN_IF_ERROR(AddNamespace(ns));
      RETURN_IF_ERROR(Ip(
          {"-n", hub_, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns}));
      RETURN_IF_ERROR(Ip({"-n", hub_, "link", "set", port, "master", "br0", "up"}));
      RETURN_IF_ERROR(
          Ip({"-n", ns, "addr", "add", absl::StrCat(Address(i), "/24"), "dev", "eth0"}));
      RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "eth0", "up"}));
    }
    return absl::OkStatus();
  }

  ~Network() {
    for (const std::string& ns : namespaces_) (void)Ip({"netns", "del", ns});
  }

  std::string Namespace(const std::string& host) const { return prefix_ + "-" + host; }
  static std::string Address(size_t i) { return absl::StrCat("10.213.47.", i + 1); }
  // Cuts (or mends) the link of the `i`-th host at the bridge: its packets go nowhere, and
  // nothing tells its peers (a partition, not a closed socket).
  absl::Status SetLink(size_t i, bool up) {
    return Ip({"-n", hub_, "link", "set", absl::StrCat("p", i), up ? "up" : "down"});
  }

 private:
  absl::Status AddNamespace(const std::string& ns) {
    RETURN_IF_ERROR(Ip({"netns", "add", ns}));
    namespaces_.push_back(ns);
    return Ip({"-n", ns, "link", "set", "lo", "up"});
  }

  std::string prefix_, hub_;
  std::vector<std::string> namespaces_;
};

TEST_F(JobTest, DaemonsOnTheirOwnHostsTrainOverTlsAndRefuseStrangers) {
  // Hosts: the parameter server, two workers, the client.
  Network network;
  if (absl::Status created = network.Create({"ps", "w0", "w1", "client"}); !created.ok()) {
    GTEST_SKIP() << "network namespaces unavailable here (needs root): " << created.message();
  }
  const std::string ps_ip = Network::Address(0), w0_ip = Network::Address(1),
                    w1_ip = Network::Address(2);
  const std::string certs = TmpDir() + "/hosts-certs";
  fs::remove_all(certs);
  ASSERT_EQ(Tessera({"certs", certs, "--hosts",
                     absl::StrJoin({ps_ip, w0_ip, w1_ip, std::string("client")}, ",")})
                .code,
            0);
  ASSERT_EQ(Tessera({"certs", certs + "/other", "--hosts", "client"}).code, 0);
  const std::string token = TmpDir() + "/hosts-token";
  const std::string wrong_token = TmpDir() + "/hosts-wrong-token";
  ASSERT_THAT(WriteStringToFile(token, "hosts token\n", kOwnerOnly), IsOk());
  ASSERT_THAT(WriteStringToFile(wrong_token, "not the hosts token\n", kOwnerOnly), IsOk());
  auto on = [&](const std::string& host, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", network.Namespace(host)});
    return argv;
  };

  // Plaintext on a host's own address is refused at start.
  {
    const std::string err = TmpDir() + "/hosts-refused.err";
    auto p = Subprocess::Start(
        {.argv = on("w0", {RunfilePath("worker/tessera-worker"), "--address=" + w0_ip + ":7000"}),
         .stderr_path = err});
    ASSERT_THAT(p.status(), IsOk());
    absl::StatusOr<ExitStatus> exit = (*p)->Wait(absl::Seconds(30));
    ASSERT_THAT(exit.status(), IsOk());
    EXPECT_EQ(exit->code, 1);
    EXPECT_THAT(ReadFileToString(err).value_or(""), HasSubstr("will not serve " + w0_ip + ":7000"));
  }

  const std::vector<std::string> roots = {"--data_root=" + DataDir(),
                                          "--run_root=" + TmpDir() + "/runs"};
  Daemon ps = StartDaemon(
      "hosts-ps", on("ps", {RunfilePath("server/tessera-ps"), "--address=" + ps_ip + ":9000",
                            "--index=0", "--num_servers=1", "--num_workers=2",
                            "--tls_dir=" + certs + "/" + ps_ip, "--token_file=" + token}));
  Daemon w0 = StartDaemon(
      "hosts-w0",
      on("w0", {RunfilePath("worker/tessera-worker"), "--address=" + w0_ip + ":7000",
                "--tls_dir=" + certs + "/" + w0_ip, "--token_file=" + token, roots[0], roots[1]}));
  Daemon w1 = StartDaemon(
      "hosts-w1",
      on("w1", {RunfilePath("worker/tessera-worker"), "--address=" + w1_ip + ":7000",
                "--tls_dir=" + certs + "/" + w1_ip, "--token_file=" + token, roots[0], roots[1]}));
  ASSERT_FALSE(ps.address.empty() || w0.address.empty() || w1.address.empty());
  const std::string workers = absl::StrCat(w0_ip, ":7000,", w1_ip, ":7000");
  // A job without an end of its own holds the cluster busy until the test cancels it, so the
  // checks below see it running on any machine.
  const std::string job = WriteJob({.name = "hosts-mlp", .epochs = 1'000'000});
  const std::string other_job = WriteJob({.name = "hosts-other", .epochs = 2});
  const std::vector<std::string> good = {"--tls_dir", certs + "/client", "--token_file", token};
  auto tessera = [&](std::vector<std::string> args, const std::vector<std::string>& flags) {
    args.insert(args.begin(), RunfilePath("client/tessera"));
    args.insert(args.end(), {"--workers", workers});
    args.insert(args.end(), flags.begin(), flags.end());
    return RunCommand(on("client", args));
  };
  auto submit = [&](std::vector<std::string> flags, const std::string& job_file) {
    flags.insert(flags.end(), {"--servers", ps_ip + ":9000"});
    return tessera({"submit", job_file}, flags);
  };

  // The cluster's own client submits; while its job runs, strangers are refused and a second
  // job of the cluster's own client waits its turn.
  std::vector<std::string> no_wait = good;
  no_wait.push_back("--no-wait");
  const Command first = submit(no_wait, job);
  ASSERT_EQ(first.code, 0) << first.err << ReadFileToString(w0.log).value_or("");
  ASSERT_EQ(first.lines.size(), 1u) << first.out;
  const std::string id = first.lines[0];
  std::vector<std::string> as_json = good;
  as_json.push_back("--json");
  nlohmann::json record;
  for (const absl::Time deadline = absl::Now() + kJobTimeout; absl::Now() < deadline;) {
    record = JobRecordOf(tessera({"jobs"}, as_json), id);
    if (!record.is_null() && record["state"] != "queued" && BatchesDone(record) > 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_FALSE(record.is_null());
  ASSERT_EQ(record["state"], "running") << record.dump() << ReadFileToString(w0.log).value_or("");

  const Command plaintext = submit({"--token_file", token}, job);
  EXPECT_EQ(plaintext.code, 1);
  EXPECT_THAT(plaintext.err, HasSubstr("will not dial " + w0_ip + ":7000 in plaintext"));
  const Command no_token = submit({"--tls_dir", certs + "/client"}, job);
  EXPECT_EQ(no_token.code, 1);
  EXPECT_THAT(no_token.err, HasSubstr("UNAUTHENTICATED"));
  const Command wrong = submit({"--tls_dir", certs + "/client", "--token_file", wrong_token}, job);
  EXPECT_THAT(wrong.err, HasSubstr("wrong cluster token"));
  const Command stranger =
      submit({"--tls_dir", certs + "/other/client", "--token_file", token}, job);
  EXPECT_THAT(stranger.err, HasSubstr("TLS handshake failed"));
  const Command peek = tessera({"jobs"}, {"--tls_dir", certs + "/client", "--token_file", wrong_token});
  EXPECT_EQ(peek.code, 1);
  EXPECT_THAT(peek.err, HasSubstr("wrong cluster token"));

  const Command second = submit(no_wait, other_job);
  ASSERT_EQ(second.code, 0) << second.err;
  const std::string second_id = second.lines.empty() ? "" : second.lines[0];
  const nlohmann::json waiting = JobRecordOf(tessera({"jobs"}, as_json), second_id);
  ASSERT_FALSE(waiting.is_null());
  EXPECT_EQ(waiting["state"], "queued");

  // The first is cancelled; the second then trains across the hosts to its end.
  EXPECT_EQ(tessera({"cancel", id}, good).code, 0);
  const Command waited = tessera({"wait", second_id}, good);
  ASSERT_EQ(waited.code, 0) << waited.out << waited.err << ReadFileToString(ps.log).value_or("")
                            << ReadFileToString(w0.log).value_or("")
                            << ReadFileToString(w1.log).value_or("");
  const nlohmann::json done = JobRecordOf(tessera({"jobs"}, as_json), second_id);
  ASSERT_FALSE(done.is_null());
  EXPECT_GT(done["eval"]["accuracy"].get<double>(), 0.9) << done.dump();
  EXPECT_EQ(JobRecordOf(tessera({"jobs"}, as_json), id)["state"], "cancelled");
  for (Daemon* d : {&ps, &w0, &w1}) EXPECT_TRUE(d->process->running()) << d->log;
}

// A partition: the link of the server of index 0 is cut mid-job (three workers and two servers
// on hosts of their own, TLS and a token). The workers' keepalive gives up on it, the majority
// moves index 0 to server 1, and the job goes on. When the link is back, server 1 makes the
// copy of index 0, which it serves now, on the returned server: the job is tolerant to the
// next fault again. (Were the old server to try to serve index 0 again, server 1 refuses its
// updates and it fences itself: ReplicationTest covers that.)
TEST_F(JobTest, APartitionedServerIsFailedOverAndTheCopyIsMadeAgainWhenTheLinkIsBack) {
  Network network;
  if (absl::Status created = network.Create({"ps0", "ps1", "w0", "w1", "w2", "client"});
      !created.ok()) {
    GTEST_SKIP() << "network namespaces unavailable here (needs root): " << created.message();
  }
  std::vector<std::string> ips;
  for (size_t i = 0; i < 5; ++i) ips.push_back(Network::Address(i));
  const std::string certs = TmpDir() + "/partition-certs";
  fs::remove_all(certs);
  ASSERT_EQ(Tessera({"certs", certs, "--hosts", absl::StrJoin(ips, ",") + ",client"}).code, 0);
  const std::string token = TmpDir() + "/partition-token";
  ASSERT_THAT(WriteStringToFile(token, "partition token\n", kOwnerOnly), IsOk());
  auto on = [&](const std::string& host, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", network.Namespace(host)});
    return argv;
  };
  const std::string ps_hosts = absl::StrCat(ips[0], ":9000,", ips[1], ":9000");
  std::vector<Daemon> servers, workers;
  for (int s = 0; s < 2; ++s) {
    servers.push_back(StartDaemon(
        absl::StrCat("partition-ps", s),
        on(absl::StrCat("ps", s),
           {RunfilePath("server/tessera-ps"), absl::StrCat("--address=", ips[s], ":9000"),
            absl::StrCat("--index=", s), "--ps_hosts=" + ps_hosts, "--num_workers=3",
            "--tls_dir=" + certs + "/" + ips[s], "--token_file=" + token})));
  }
  std::vector<std::string> worker_addresses;
  for (int w = 0; w < 3; ++w) {
    const std::string ip = ips[2 + w];
    workers.push_back(StartDaemon(
        absl::StrCat("partition-w", w),
        on(absl::StrCat("w", w),
           {RunfilePath("worker/tessera-worker"), "--address=" + ip + ":7000",
            "--tls_dir=" + certs + "/" + ip, "--token_file=" + token,
            "--data_root=" + DataDir(), "--run_root=" + TmpDir() + "/runs"})));
    worker_addresses.push_back(ip + ":7000");
  }
  for (const Daemon& d : servers) ASSERT_FALSE(d.address.empty()) << d.log;
  for (const Daemon& d : workers) ASSERT_FALSE(d.address.empty()) << d.log;
  // A job without an end of its own: it runs until the test cancels it.
  const std::string job = WriteJob(
      {.name = "partition-mlp", .epochs = 1'000'000, .workers = 3, .servers = 2});
  const std::vector<std::string> client = {"--tls_dir", certs + "/client", "--token_file", token,
                                           "--workers", absl::StrJoin(worker_addresses, ",")};
  auto tessera = [&](std::vector<std::string> args) {
    args.insert(args.begin(), RunfilePath("client/tessera"));
    args.insert(args.end(), client.begin(), client.end());
    return RunCommand(on("client", args));
  };
  const Command submitted = tessera({"submit", job, "--servers", ps_hosts, "--no-wait"});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  ASSERT_EQ(submitted.lines.size(), 1u) << submitted.out;
  const std::string id = submitted.lines[0];
  // Batches done so far (waits until the job has some beyond `than`).
  auto batches_beyond = [&](int64_t than) {
    nlohmann::json record;
    for (const absl::Time deadline = absl::Now() + kJobTimeout; absl::Now() < deadline;) {
      record = JobRecordOf(tessera({"jobs", "--json"}), id);
      if (!record.is_null() && record["state"] == "running" && BatchesDone(record) > than) {
        return BatchesDone(record);
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "the job did no batch beyond " << than << ": " << record.dump()
                  << ReadFileToString(workers[0].log).value_or("");
    return int64_t{-1};
  };
  auto log_says = [&](const Daemon& d, const std::string& what) {
    for (const absl::Time deadline = absl::Now() + absl::Seconds(120); absl::Now() < deadline;) {
      if (absl::StrContains(ReadFileToString(d.log).value_or(""), what)) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  };
  const int64_t before = batches_beyond(0);
  ASSERT_GT(before, 0);
  ASSERT_THAT(network.SetLink(0, /*up=*/false), IsOk());
  EXPECT_TRUE(log_says(servers[1], "serving its keys from here on (view 1)"))
      << ReadFileToString(servers[1].log).value_or("");
  const int64_t during = batches_beyond(before);
  EXPECT_GT(during, before);
  ASSERT_THAT(network.SetLink(0, /*up=*/true), IsOk());
  EXPECT_TRUE(log_says(servers[1], "server index 0: its backup"))
      << ReadFileToString(servers[1].log).value_or("");
  EXPECT_GT(batches_beyond(during), during);  // the job goes on
  EXPECT_EQ(tessera({"cancel", id}).code, 0);
  for (const Daemon& d : workers) EXPECT_TRUE(d.process->running()) << d.log;
}

}  // namespace
}  // namespace tessera::integration

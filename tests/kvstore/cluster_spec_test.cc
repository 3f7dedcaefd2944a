#include "kvstore/cluster_spec.h"

#include <map>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

// A fake environment: the variables in `vars`, nothing else.
EnvLookup FakeEnv(Env vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

absl::StatusOr<ClusterSpec> Resolve(const Env& env, const ClusterSpecFlags& flags = {}) {
  return ResolveClusterSpec(flags, FakeEnv(env));
}

TEST(ClusterSpecTest, TesseraVariablesOnly) {
  absl::StatusOr<ClusterSpec> spec = Resolve({{"TESSERA_ROLE", "server"},
                                              {"TESSERA_INDEX", "1"},
                                              {"TESSERA_PS_HOSTS", "a:1, b:2"},
                                              {"TESSERA_WORKER_HOSTS", "w0:10,w1:11,[::1]:12"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->role, Role::kServer);
  EXPECT_EQ(spec->index, 1);
  EXPECT_THAT(spec->servers, ElementsAre("a:1", "b:2"));
  EXPECT_THAT(spec->workers, ElementsAre("w0:10", "w1:11", "[::1]:12"));
  EXPECT_EQ(spec->num_servers(), 2);
  EXPECT_EQ(spec->num_workers(), 3);
  EXPECT_EQ(spec->DebugString(),
            "server 1 of 2, servers [a:1, b:2], workers [w0:10, w1:11, [::1]:12]");
}

TEST(ClusterSpecTest, WorkerCountWithoutAddresses) {
  absl::StatusOr<ClusterSpec> spec = Resolve({{"TESSERA_ROLE", "worker"},
                                              {"TESSERA_INDEX", "1"},
                                              {"TESSERA_PS_HOSTS", "a:1,b:2"},
                                              {"TESSERA_NUM_WORKERS", "2"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_THAT(spec->workers, ElementsAre("", ""));
  EXPECT_EQ(spec->DebugString(), "worker 1 of 2, servers [a:1, b:2]");

  // The count also comes from the flag (winning over the environment) or DMLC_NUM_WORKER.
  ClusterSpecFlags flags;
  flags.num_workers = 4;
  spec = Resolve(
      {{"TESSERA_PS_HOSTS", "a:1"}, {"TESSERA_NUM_WORKERS", "3"}, {"TESSERA_INDEX", "3"}}, flags);
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->num_workers(), 4);
  spec = Resolve({{"TESSERA_PS_HOSTS", "a:1"}, {"DMLC_NUM_WORKER", "3"}, {"TESSERA_INDEX", "2"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_THAT(spec->workers, ElementsAre("", "", ""));

  // A server shows the worker count in its DebugString.
  spec = Resolve(
      {{"TESSERA_ROLE", "server"}, {"TESSERA_PS_HOSTS", "a:1"}, {"TESSERA_NUM_WORKERS", "3"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->DebugString(), "server 0 of 1, servers [a:1], 3 workers");
}

TEST(ClusterSpecTest, ServerCountWithoutAddresses) {
  // A server that listens on --address needs the count and its index, not the others'
  // addresses.
  ClusterSpecFlags flags;
  flags.role = "server";
  flags.index = 1;
  flags.num_servers = 3;
  flags.num_workers = 2;
  absl::StatusOr<ClusterSpec> spec = Resolve({}, flags);
  ASSERT_THAT(spec, IsOk());
  EXPECT_THAT(spec->servers, ElementsAre("", "", ""));
  EXPECT_EQ(spec->DebugString(), "server 1 of 3, 2 workers");

  // With a list as well, the two must agree.
  spec = Resolve({{"TESSERA_PS_HOSTS", "a:1,b:2"}}, flags);
  EXPECT_THAT(spec, StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("--num_servers=3 disagrees with the 2 servers in "
                                       "TESSERA_PS_HOSTS='a:1,b:2'")));
  flags.index = 2;
  spec = Resolve({{"TESSERA_PS_HOSTS", "a:1,b:2,c:3"}}, flags);
  ASSERT_THAT(spec, IsOk());
  EXPECT_THAT(spec->servers, ElementsAre("a:1", "b:2", "c:3"));

  // A worker needs the addresses; an index beyond the count is an error.
  flags.role = "worker";
  flags.index = 0;
  EXPECT_THAT(Resolve({}, flags),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs the servers' addresses")));
  flags.role = "server";
  flags.index = 3;
  EXPECT_THAT(Resolve({}, flags), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--index")));
  flags.index = 0;
  flags.num_servers = 0;
  EXPECT_THAT(Resolve({}, flags),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--num_servers='0'")));
}

TEST(ClusterSpecTest, FlagsOverrideTesseraOverridesDmlc) {
  const Env env = {{"TESSERA_ROLE", "server"},      {"TESSERA_INDEX", "1"},
                   {"TESSERA_PS_HOSTS", "a:1,b:2"}, {"TESSERA_NUM_WORKERS", "5"},
                   {"TESSERA_WORKER_HOSTS", "x:1"}, {"DMLC_ROLE", "scheduler"},
                   {"DMLC_SERVER_ID", "0"},         {"DMLC_NUM_WORKER", "7"}};
  ClusterSpecFlags flags;
  flags.role = "worker";
  flags.index = 2;
  flags.ps_hosts = "c:3";
  flags.worker_hosts = "p:1,q:2,r:3";
  flags.num_workers = 3;
  absl::StatusOr<ClusterSpec> spec = Resolve(env, flags);
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->role, Role::kWorker);
  EXPECT_EQ(spec->index, 2);
  EXPECT_THAT(spec->servers, ElementsAre("c:3"));
  EXPECT_THAT(spec->workers, ElementsAre("p:1", "q:2", "r:3"));

  // Without flags the TESSERA_* values win over DMLC_ROLE=scheduler and DMLC_SERVER_ID.
  Env tessera_env = env;
  tessera_env.erase("TESSERA_WORKER_HOSTS");
  spec = Resolve(tessera_env);
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->DebugString(), "server 1 of 2, servers [a:1, b:2], 5 workers");

  // A variable set to "" counts as unset.
  spec = Resolve({{"TESSERA_ROLE", ""},
                  {"DMLC_ROLE", "server"},
                  {"TESSERA_PS_HOSTS", "a:1"},
                  {"TESSERA_NUM_WORKERS", "1"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->role, Role::kServer);
}

// What Kubeflow's MXJob sets on a worker pod (training-operator SetPodEnv), no TESSERA_*.
TEST(ClusterSpecTest, DmlcOnlyMxJobWorker) {
  absl::StatusOr<ClusterSpec> spec = Resolve({{"DMLC_ROLE", "worker"},
                                              {"DMLC_PS_ROOT_URI", "job-scheduler-0"},
                                              {"DMLC_PS_ROOT_PORT", "9091"},
                                              {"DMLC_NUM_SERVER", "2"},
                                              {"DMLC_NUM_WORKER", "3"},
                                              {"DMLC_WORKER_ID", "2"},
                                              {"DMLC_USE_KUBERNETES", "1"},
                                              {"MX_CONFIG", "{}"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->role, Role::kWorker);
  EXPECT_EQ(spec->index, 2);
  EXPECT_THAT(spec->servers, ElementsAre("job-scheduler-0:9091", "job-scheduler-0:9092"));
  EXPECT_THAT(spec->workers, ElementsAre("", "", ""));
}

// The documented MXJob recipe: no Scheduler replica (so MXJob exports an empty root URI and
// port 0), TESSERA_PS_HOSTS in the template, and the server's index from a flag.
TEST(ClusterSpecTest, MxJobServerWithTesseraPsHosts) {
  ClusterSpecFlags flags;
  flags.index = 1;
  absl::StatusOr<ClusterSpec> spec =
      Resolve({{"DMLC_ROLE", "server"},
               {"DMLC_PS_ROOT_URI", ""},
               {"DMLC_PS_ROOT_PORT", "0"},
               {"DMLC_NUM_SERVER", "2"},
               {"DMLC_NUM_WORKER", "2"},
               {"TESSERA_PS_HOSTS", "j-server-0:9091,j-server-1:9091"}},
              flags);
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->DebugString(),
            "server 1 of 2, servers [j-server-0:9091, j-server-1:9091], 2 workers");
}

TEST(ClusterSpecTest, DmlcIndexVariables) {
  const Env base = {{"DMLC_PS_ROOT_URI", "::1"},
                    {"DMLC_PS_ROOT_PORT", "9000"},
                    {"DMLC_NUM_SERVER", "2"},
                    {"DMLC_NUM_WORKER", "2"}};
  auto with = [&](Env extra) {
    extra.insert(base.begin(), base.end());
    return Resolve(extra);
  };
  // dmlc's kubernetes launcher: DMLC_SERVER_ID on servers, and DMLC_SERVER_ID=0 on workers too,
  // which a worker must not read.
  absl::StatusOr<ClusterSpec> spec = with({{"DMLC_ROLE", "server"}, {"DMLC_SERVER_ID", "1"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->index, 1);
  EXPECT_THAT(spec->servers, ElementsAre("[::1]:9000", "[::1]:9001"));
  spec = with({{"DMLC_ROLE", "worker"}, {"DMLC_WORKER_ID", "1"}, {"DMLC_SERVER_ID", "0"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->index, 1);
  // dmlc's local launcher numbers servers after the workers; YARN numbers each role from 0.
  spec = with({{"DMLC_ROLE", "server"}, {"DMLC_TASK_ID", "3"}, {"DMLC_JOB_CLUSTER", "local"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->index, 1);
  spec = with({{"DMLC_ROLE", "worker"}, {"DMLC_TASK_ID", "1"}, {"DMLC_JOB_CLUSTER", "local"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->index, 1);
  spec = with({{"DMLC_ROLE", "server"}, {"DMLC_TASK_ID", "1"}, {"DMLC_JOB_CLUSTER", "yarn"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->index, 1);
}

// TFJob's TF_CONFIG: the chief is worker 0, TFJob's workers follow it; ps are the servers.
TEST(ClusterSpecTest, TfConfigOfATfJob) {
  const std::string cluster =
      R"("cluster": {"chief": ["job-chief-0:2222"], "worker": ["job-worker-0:2222",)"
      R"( "job-worker-1:2222"], "ps": ["job-ps-0:2222", "job-ps-1:2222"]})";
  absl::StatusOr<ClusterSpec> worker = Resolve(
      {{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "worker", "index": 1}})"}});
  ASSERT_THAT(worker, IsOk());
  EXPECT_EQ(worker->role, Role::kWorker);
  EXPECT_EQ(worker->index, 2);
  EXPECT_THAT(worker->servers, ElementsAre("job-ps-0:2222", "job-ps-1:2222"));
  EXPECT_THAT(worker->workers,
              ElementsAre("job-chief-0:2222", "job-worker-0:2222", "job-worker-1:2222"));
  absl::StatusOr<ClusterSpec> chief =
      Resolve({{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "chief", "index": 0}})"}});
  ASSERT_THAT(chief, IsOk());
  EXPECT_EQ(chief->role, Role::kWorker);
  EXPECT_EQ(chief->index, 0);
  absl::StatusOr<ClusterSpec> server =
      Resolve({{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "ps", "index": 1}})"}});
  ASSERT_THAT(server, IsOk());
  EXPECT_EQ(server->role, Role::kServer);
  EXPECT_EQ(server->index, 1);
  EXPECT_EQ(server->num_workers(), 3);
  // TESSERA_* and flags still win over it.
  absl::StatusOr<ClusterSpec> overridden =
      Resolve({{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "ps", "index": 1}})"},
               {"TESSERA_PS_HOSTS", "x:1"}},
              {.index = 0});
  ASSERT_THAT(overridden, IsOk());
  EXPECT_THAT(overridden->servers, ElementsAre("x:1"));
  EXPECT_EQ(overridden->index, 0);
}

TEST(ClusterSpecTest, BadTfConfigIsNamed) {
  EXPECT_THAT(Resolve({{"TF_CONFIG", "{not json"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("TF_CONFIG='{not json'"), HasSubstr("not a JSON object"))));
  EXPECT_THAT(Resolve({{"TF_CONFIG", R"({"cluster": {"ps": "a:1"}})"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.ps is not a list")));
  EXPECT_THAT(
      Resolve({{"TF_CONFIG",
                R"({"cluster": {"ps": ["a:1"], "worker": ["w:1"]}, "task": {"type": "evaluator",)"
                R"( "index": 0}})"}}),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("task type 'evaluator'")));
  EXPECT_THAT(Resolve({{"TF_CONFIG",
                        R"({"cluster": {"ps": ["a:1"], "worker": ["w:1"]}, "task": {"type": )"
                        R"("worker", "index": 3}})"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("TF_CONFIG.task.index='3'"),
                             HasSubstr("less than the number of workers (1)"))));
  EXPECT_THAT(Resolve({{"TF_CONFIG", R"({"cluster": {"ps": ["bad host"], "worker": ["w:1"]}})"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TF_CONFIG.cluster.ps")));
}

TEST(ClusterSpecTest, SchedulerRoleIsRefused) {
  EXPECT_THAT(Resolve({{"DMLC_ROLE", "scheduler"},
                       {"DMLC_PS_ROOT_URI", "job-scheduler-0"},
                       {"DMLC_PS_ROOT_PORT", "9091"},
                       {"DMLC_NUM_SERVER", "1"},
                       {"DMLC_NUM_WORKER", "1"}}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("DMLC_ROLE='scheduler'"), HasSubstr("no scheduler process"),
                             HasSubstr("must not be started"))));
}

TEST(ClusterSpecTest, IndexDefaultsToZeroOnlyForALoneProcess) {
  absl::StatusOr<ClusterSpec> spec =
      Resolve({{"TESSERA_PS_HOSTS", "a:1"}, {"TESSERA_NUM_WORKERS", "1"}});
  ASSERT_THAT(spec, IsOk());
  EXPECT_EQ(spec->role, Role::kWorker);  // the default role
  EXPECT_EQ(spec->index, 0);
  EXPECT_THAT(Resolve({{"TESSERA_PS_HOSTS", "a:1"}, {"TESSERA_NUM_WORKERS", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("no index for this worker (one of 2)"),
                             HasSubstr("TESSERA_INDEX"), HasSubstr("DMLC_WORKER_ID"))));
}

struct BadCase {
  Env env;  // added to a valid base, replacing its entries
  std::vector<std::string> message_parts;
};

TEST(ClusterSpecTest, ValidationErrorsNameTheVariable) {
  const Env base = {{"TESSERA_ROLE", "worker"},
                    {"TESSERA_INDEX", "0"},
                    {"TESSERA_PS_HOSTS", "a:1,b:2"},
                    {"TESSERA_NUM_WORKERS", "2"}};
  const std::vector<BadCase> cases = {
      {{{"TESSERA_ROLE", "chief"}}, {"TESSERA_ROLE='chief'", "unknown role"}},
      {{{"TESSERA_ROLE", ""}, {"DMLC_ROLE", "tunerserver"}}, {"DMLC_ROLE='tunerserver'"}},
      {{{"TESSERA_INDEX", "abc"}}, {"TESSERA_INDEX='abc': not an integer"}},
      {{{"TESSERA_INDEX", "-1"}}, {"TESSERA_INDEX='-1': must be at least 0"}},
      {{{"TESSERA_INDEX", "2"}}, {"TESSERA_INDEX='2'", "less than the number of workers (2)"}},
      {{{"TESSERA_INDEX", ""}, {"DMLC_WORKER_ID", "x"}}, {"DMLC_WORKER_ID='x'"}},
      {{{"TESSERA_ROLE", "server"}, {"TESSERA_INDEX", ""}, {"DMLC_SERVER_ID", "2"}},
       {"DMLC_SERVER_ID='2'", "less than the number of servers (2)"}},
      {{{"TESSERA_ROLE", "server"},
        {"TESSERA_INDEX", ""},
        {"DMLC_TASK_ID", "1"},
        {"DMLC_JOB_CLUSTER", "local"}},
       {"DMLC_TASK_ID='1'", "after the 2 workers"}},
      {{{"TESSERA_PS_HOSTS", "a:1,,b:2"}}, {"TESSERA_PS_HOSTS='a:1,,b:2': entry 1 '': empty"}},
      {{{"TESSERA_PS_HOSTS", "a"}}, {"TESSERA_PS_HOSTS", "'a': expected host:port"}},
      {{{"TESSERA_PS_HOSTS", ":80"}}, {"TESSERA_PS_HOSTS", "empty host"}},
      {{{"TESSERA_PS_HOSTS", "a:0"}}, {"TESSERA_PS_HOSTS", "port '0' is not a number in 1..65535"}},
      {{{"TESSERA_PS_HOSTS", "a:65536"}}, {"TESSERA_PS_HOSTS", "port '65536'"}},
      {{{"TESSERA_PS_HOSTS", "a:+80"}}, {"TESSERA_PS_HOSTS", "port '+80'"}},
      {{{"TESSERA_PS_HOSTS", "a:"}}, {"TESSERA_PS_HOSTS", "port ''"}},
      {{{"TESSERA_PS_HOSTS", "::1:80"}}, {"TESSERA_PS_HOSTS", "must be in brackets"}},
      {{{"TESSERA_PS_HOSTS", "[]:80"}}, {"TESSERA_PS_HOSTS", "malformed bracketed IPv6 host"}},
      {{{"TESSERA_PS_HOSTS", "[::1:80"}}, {"TESSERA_PS_HOSTS", "malformed bracketed IPv6 host"}},
      {{{"TESSERA_WORKER_HOSTS", "w:1,w:x"}}, {"TESSERA_WORKER_HOSTS='w:1,w:x': entry 1 'w:x'"}},
      {{{"TESSERA_PS_HOSTS", ""}}, {"no parameter servers", "TESSERA_PS_HOSTS", "--ps_hosts"}},
      {{{"TESSERA_NUM_WORKERS", ""}}, {"no workers", "TESSERA_NUM_WORKERS", "DMLC_NUM_WORKER"}},
      {{{"TESSERA_NUM_WORKERS", "0"}}, {"TESSERA_NUM_WORKERS='0': must be at least 1"}},
      {{{"TESSERA_NUM_WORKERS", "2000000000"}},
       {"TESSERA_NUM_WORKERS='2000000000': must be at most"}},
      {{{"DMLC_NUM_SERVER", "3"}},
       {"DMLC_NUM_SERVER=3 disagrees with the 2 servers in TESSERA_PS_HOSTS='a:1,b:2'"}},
      {{{"DMLC_NUM_SERVER", "two"}}, {"DMLC_NUM_SERVER='two': not an integer"}},
      {{{"TESSERA_NUM_WORKERS", ""}, {"DMLC_NUM_WORKER", "3"}, {"TESSERA_WORKER_HOSTS", "w:1,w:2"}},
       {"DMLC_NUM_WORKER='3': disagrees with the 2 workers in TESSERA_WORKER_HOSTS"}},
      {{{"TESSERA_PS_HOSTS", ""}, {"DMLC_PS_ROOT_URI", "h"}, {"DMLC_NUM_SERVER", "1"}},
       {"DMLC_PS_ROOT_URI is set but DMLC_PS_ROOT_PORT is not"}},
      {{{"TESSERA_PS_HOSTS", ""}, {"DMLC_PS_ROOT_URI", "h"}, {"DMLC_PS_ROOT_PORT", "1"}},
       {"DMLC_PS_ROOT_URI is set but DMLC_NUM_SERVER is not"}},
      {{{"TESSERA_PS_HOSTS", ""},
        {"DMLC_PS_ROOT_URI", "h"},
        {"DMLC_PS_ROOT_PORT", "70000"},
        {"DMLC_NUM_SERVER", "1"}},
       {"DMLC_PS_ROOT_PORT='70000': must be at most 65535"}},
      {{{"TESSERA_PS_HOSTS", ""},
        {"DMLC_PS_ROOT_URI", "h"},
        {"DMLC_PS_ROOT_PORT", "65535"},
        {"DMLC_NUM_SERVER", "2"}},
       {"DMLC_PS_ROOT_PORT='65535'", "run past 65535"}},
      {{{"TESSERA_PS_HOSTS", ""},
        {"DMLC_PS_ROOT_URI", "[h"},
        {"DMLC_PS_ROOT_PORT", "1"},
        {"DMLC_NUM_SERVER", "1"}},
       {"DMLC_PS_ROOT_URI='[h'"}},
  };
  for (const BadCase& c : cases) {
    Env env = c.env;
    env.insert(base.begin(), base.end());  // keeps the case's own entries
    absl::StatusOr<ClusterSpec> spec = Resolve(env);
    ASSERT_FALSE(spec.ok()) << c.message_parts[0] << ": " << spec->DebugString();
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
    for (const std::string& part : c.message_parts) {
      EXPECT_THAT(std::string(spec.status().message()), HasSubstr(part));
    }
  }
}

TEST(ClusterSpecTest, FlagErrorsNameTheFlag) {
  const Env env = {{"TESSERA_PS_HOSTS", "a:1"}, {"TESSERA_NUM_WORKERS", "2"}};
  ClusterSpecFlags flags;
  flags.role = "ps";
  EXPECT_THAT(Resolve(env, flags),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--role='ps'")));
  flags = {};
  flags.index = -1;
  EXPECT_THAT(Resolve(env, flags),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--index='-1'")));
  flags = {};
  flags.index = 0;
  flags.ps_hosts = "";
  EXPECT_THAT(Resolve(env, flags), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("--ps_hosts='': entry 0 '': empty")));
  flags.ps_hosts = "a:1";
  flags.num_workers = 3;
  flags.worker_hosts = "w:1";
  EXPECT_THAT(
      Resolve(env, flags),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("--num_workers='3': disagrees with the 1 workers in --worker_hosts")));
}

TEST(ClusterSpecTest, ProcessEnvironmentReadsGetenv) {
  ASSERT_EQ(setenv("TESSERA_CLUSTER_SPEC_TEST_VAR", "v", 1), 0);
  EnvLookup env = ProcessEnvironment();
  EXPECT_EQ(env("TESSERA_CLUSTER_SPEC_TEST_VAR"), "v");
  unsetenv("TESSERA_CLUSTER_SPEC_TEST_VAR");
  EXPECT_EQ(env("TESSERA_CLUSTER_SPEC_TEST_VAR"), std::nullopt);
}

}  // namespace
}  // namespace tessera::kvstore

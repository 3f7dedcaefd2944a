#include "core/file.h"
#include "core/subprocess.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/subprocess_test_", name);
}

// True while `pid` names a process (or an unreaped zombie).
bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(SubprocessTest, ReportsExitCodeAndRedirectsStdout) {
  const std::string out = TempPath("exit3.out");
  auto child =
      Subprocess::Start({.argv = {"/bin/sh", "-c", "echo hi; exit 3"}, .stdout_path = out});
  ASSERT_THAT(child, IsOk());
  absl::StatusOr<ExitStatus> status = (*child)->Wait();
  ASSERT_THAT(status, IsOk());
  EXPECT_TRUE(status->exited);
  EXPECT_EQ(status->code, 3);
  EXPECT_EQ(status->ToString(), "exit code 3");
  EXPECT_EQ(*ReadFileToString(out), "hi\n");
  EXPECT_FALSE((*child)->running());
  // Wait again returns the same status.
  EXPECT_EQ((*(*child)->Wait(absl::ZeroDuration())).code, 3);
}

TEST(SubprocessTest, StdoutIsTruncatedAndStderrCanShareTheFile) {
  const std::string log = TempPath("both.log");
  for (int run = 0; run < 2; ++run) {  // the second run must not append to the first
    auto child = Subprocess::Start({.argv = {"sh", "-c", "echo out; echo err >&2; echo out2"},
                                    .stdout_path = log,
                                    .stderr_path = log});
    ASSERT_THAT(child, IsOk());
    ASSERT_EQ((*child)->Wait()->code, 0);
  }
  EXPECT_EQ(*ReadFileToString(log), "out\nerr\nout2\n");
}

TEST(SubprocessTest, SeparateStderrFile) {
  const std::string out = TempPath("sep.out"), err = TempPath("sep.err");
  auto child = Subprocess::Start({.argv = {"sh", "-c", "echo to-out; echo to-err >&2"},
                                  .stdout_path = out,
                                  .stderr_path = err});
  ASSERT_THAT(child, IsOk());
  ASSERT_EQ((*child)->Wait()->code, 0);
  EXPECT_EQ(*ReadFileToString(out), "to-out\n");
  EXPECT_EQ(*ReadFileToString(err), "to-err\n");
}

TEST(SubprocessTest, EnvironmentIsInheritedAndOverridden) {
  ASSERT_EQ(setenv("TESSERA_SUBPROCESS_INHERITED", "kept", 1), 0);
  ASSERT_EQ(setenv("FOO", "parent", 1), 0);
  const std::string out = TempPath("env.out");
  auto child =
      Subprocess::Start({.argv = {"/bin/sh", "-c", "echo $FOO $BAR $TESSERA_SUBPROCESS_INHERITED"},
                         .env = {{"FOO", "first"}, {"BAR", "bar"}, {"FOO", "child"}},
                         .stdout_path = out});
  ASSERT_THAT(child, IsOk());
  ASSERT_EQ((*child)->Wait()->code, 0);
  EXPECT_EQ(*ReadFileToString(out), "child bar kept\n");
  unsetenv("FOO");
  unsetenv("TESSERA_SUBPROCESS_INHERITED");
}

TEST(SubprocessTest, WaitTimesOutThenSigkillIsReported) {
  auto child = Subprocess::Start({.argv = {"sleep", "30"}});
  ASSERT_THAT(child, IsOk());
  Subprocess& sleeper = **child;
  absl::Time start = absl::Now();
  EXPECT_THAT(sleeper.Wait(absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr(absl::StrCat("'sleep' (pid ", sleeper.pid(), ")"))));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_TRUE(sleeper.running());

  ASSERT_THAT(sleeper.Signal(SIGKILL), IsOk());
  absl::StatusOr<ExitStatus> status = sleeper.Wait(absl::Seconds(10));
  ASSERT_THAT(status, IsOk());
  EXPECT_FALSE(status->exited);
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_EQ(status->ToString(), "killed by signal 9");
  EXPECT_FALSE(sleeper.running());
  EXPECT_FALSE(ProcessExists(sleeper.pid()));  // reaped: no zombie left
  // Its pid may now be reused, so signalling it is refused.
  EXPECT_THAT(sleeper.Signal(SIGTERM),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("killed by signal 9")));
}

TEST(SubprocessTest, SigtermEndsChildEvenIfParentIgnoresIt) {
  // Ignored dispositions survive exec; Start resets SIGTERM to default for the child.
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &old), 0);
  auto child = Subprocess::Start({.argv = {"sleep", "30"}});
  sigaction(SIGTERM, &old, nullptr);
  ASSERT_THAT(child, IsOk());
  ASSERT_THAT((*child)->Signal(SIGTERM), IsOk());
  absl::StatusOr<ExitStatus> status = (*child)->Wait(absl::Seconds(10));
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->ToString(), "killed by signal 15");
}

TEST(SubprocessTest, StoppedChildCountsAsRunning) {
  auto child = Subprocess::Start({.argv = {"sleep", "30"}});
  ASSERT_THAT(child, IsOk());
  ASSERT_THAT((*child)->Signal(SIGSTOP), IsOk());
  EXPECT_THAT((*child)->Wait(absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE((*child)->running());
  ASSERT_THAT((*child)->Signal(SIGCONT), IsOk());
  ASSERT_THAT((*child)->Signal(SIGKILL), IsOk());
  EXPECT_EQ((*child)->Wait()->signal, SIGKILL);
}

TEST(SubprocessTest, DestructorKillsAndReapsRunningChild) {
  for (bool stopped : {false, true}) {
    auto child = Subprocess::Start({.argv = {"sleep", "30"}});
    ASSERT_THAT(child, IsOk());
    const pid_t pid = (*child)->pid();
    if (stopped) {
      ASSERT_THAT((*child)->Signal(SIGSTOP), IsOk());
    }
    EXPECT_TRUE(ProcessExists(pid));
    child->reset();
    // kill(pid, 0) also succeeds on a zombie, so failing means killed *and* reaped.
    EXPECT_NE(kill(pid, 0), 0) << "stopped=" << stopped;
    EXPECT_EQ(errno, ESRCH);
  }
}

TEST(SubprocessTest, MissingProgramIsNamed) {
  EXPECT_THAT(Subprocess::Start({.argv = {"/nonexistent/tessera-no-such-program"}}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("'/nonexistent/tessera-no-such-program': No such file")));
  // A bare name is looked up in PATH.
  EXPECT_THAT(Subprocess::Start({.argv = {"tessera-no-such-program-on-path"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tessera-no-such-program-on-path")));
  EXPECT_THAT(Subprocess::Start({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SubprocessTest, UnwritableRedirectIsReported) {
  EXPECT_THAT(Subprocess::Start({.argv = {"true"}, .stdout_path = "/nonexistent/dir/out"}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("'true' (stdout>/nonexistent/dir/out): No such file")));
}

TEST(SubprocessTest, ReadFileToStringNamesMissingPath) {
  EXPECT_THAT(ReadFileToString(TempPath("never-written")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("never-written")));
}

TEST(SubprocessTest, WaitForFileTimesOutNamingPath) {
  const std::string missing = TempPath("port-missing");
  EXPECT_THAT(WaitForFile(missing, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(missing)));

  // Written but not finished (no final newline) is not complete either.
  const std::string partial = TempPath("port-partial");
  auto writer = Subprocess::Start({.argv = {"printf", "12"}, .stdout_path = partial});
  ASSERT_THAT(writer, IsOk());
  ASSERT_EQ((*writer)->Wait()->code, 0);
  EXPECT_THAT(WaitForFile(partial, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("without a final newline")));
}

TEST(SubprocessTest, WaitForFileSeesFileWrittenLater) {
  const std::string port_file = TempPath("port");
  unlink(port_file.c_str());
  auto writer = Subprocess::Start(
      {.argv = {"/bin/sh", "-c", "sleep 0.2; printf '4242\\n' > \"$1.tmp\"; mv \"$1.tmp\" \"$1\"",
                "sh", port_file}});
  ASSERT_THAT(writer, IsOk());
  absl::StatusOr<std::string> content = WaitForFile(port_file, absl::Seconds(20));
  ASSERT_THAT(content, IsOk());
  EXPECT_EQ(*content, "4242\n");
  EXPECT_EQ((*writer)->Wait()->code, 0);
}

}  // namespace
}  // namespace tessera

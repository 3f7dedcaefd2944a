#include "tests/integration/command.h"

#include <atomic>
#include <csignal>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"

namespace tessera::integration {

Command RunCommand(const std::vector<std::string>& argv, absl::Duration timeout) {
  static std::atomic<int> count{0};  // tests run commands from several threads
  const std::string base = absl::StrCat(::testing::TempDir(), "/command-", ++count);
  Command c;
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({.argv = argv, .stdout_path = base + ".out", .stderr_path = base + ".err"});
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return c;
  absl::StatusOr<ExitStatus> exit = (*p)->Wait(timeout);
  if (!exit.ok()) {
    ADD_FAILURE() << absl::StrJoin(argv, " ") << ": " << exit.status();
    (void)(*p)->Signal(SIGTERM);
    exit = (*p)->Wait(absl::Seconds(20));
  }
  if (exit.ok() && exit->exited) c.code = exit->code;
  c.out = ReadFileToString(base + ".out").value_or("");
  c.err = ReadFileToString(base + ".err").value_or("");
  c.lines = absl::StrSplit(c.out, '\n', absl::SkipEmpty());
  return c;
}

}  // namespace tessera::integration

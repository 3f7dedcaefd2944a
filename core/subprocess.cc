#include "core/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/file.h"

extern char** environ;

namespace tessera {
namespace {

// The parent's environment with every name in `overrides` replaced (the last value given for
// a name wins), as "NAME=value" strings.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  auto overridden = [&](absl::string_view name, size_t from) {
    return std::any_of(overrides.begin() + from, overrides.end(),
                       [&](const auto& kv) { return kv.first == name; });
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    absl::string_view entry(*e);
    if (!overridden(entry.substr(0, entry.find('=')), 0)) env.emplace_back(entry);
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    if (!overridden(overrides[i].first, i + 1)) {
      env.push_back(absl::StrCat(overrides[i].first, "=", overrides[i].second));
    }
  }
  return env;
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string ExitStatus::ToString() const {
  return exited ? absl::StrCat("exit code ", code) : absl::StrCat("killed by signal ", signal);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const SubprocessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("Subprocess::Start: argv[0] (the program) is empty");
  }
  const std::string& program = options.argv[0];
  auto spawn_error = [&](int err, absl::string_view what) {
    return absl::ErrnoToStatus(err, absl::StrCat("cannot start '", program, "'", what));
  };

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  absl::Cleanup destroy_actions = [&] { posix_spawn_file_actions_destroy(&actions); };
  // The files are opened in the child, so the parent never holds (or leaks) their descriptors.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC;
  if (!options.stdout_path.empty()) {
    if (int err = posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
                                                   options.stdout_path.c_str(), kFlags, 0644)) {
      return spawn_error(err, "");
    }
  }
  if (!options.stderr_path.empty()) {
    // The same file for both: share stdout's open file description, as `2>&1` does; a second
    // open would give stderr its own offset and the two streams would overwrite each other.
    int err = options.stderr_path == options.stdout_path
                  ? posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO)
                  : posix_spawn_file_actions_addopen(&actions, STDERR_FILENO,
                                                     options.stderr_path.c_str(), kFlags, 0644);
    if (err != 0) return spawn_error(err, "");
  }

  // The child starts with no blocked signals and default SIGPIPE/SIGTERM/SIGINT/SIGHUP even
  // if this process (a test runner, a gRPC server) blocks or ignores them: exec keeps both the
  // mask and ignored dispositions, and a daemon that cannot be stopped by SIGTERM or that
  // ignores a broken pipe would behave differently under the launcher than from a shell.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  absl::Cleanup destroy_attr = [&] { posix_spawnattr_destroy(&attr); };
  sigset_t no_signals, default_signals;
  sigemptyset(&no_signals);
  sigemptyset(&default_signals);
  for (int signo : {SIGPIPE, SIGTERM, SIGINT, SIGHUP}) sigaddset(&default_signals, signo);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv = CStrings(options.argv);
  std::vector<std::string> env_strings = ChildEnvironment(options.env);
  std::vector<char*> envp = CStrings(env_strings);
  pid_t pid = 0;
  // glibc (>= 2.24) reports a failed exec or file action here, with its errno.
  if (int err = posix_spawnp(&pid, program.c_str(), &actions, &attr, argv.data(), envp.data())) {
    std::string redirects;
    if (!options.stdout_path.empty()) absl::StrAppend(&redirects, " stdout>", options.stdout_path);
    if (!options.stderr_path.empty()) absl::StrAppend(&redirects, " stderr>", options.stderr_path);
    return spawn_error(err, redirects.empty() ? "" : absl::StrCat(" (", redirects.substr(1), ")"));
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, program));
}

Subprocess::~Subprocess() {
  if (exit_status_.has_value()) return;
  kill(pid_, SIGKILL);
  // SIGKILL ends even a stopped child, so this blocking wait returns promptly.
  Reap(0).IgnoreError();
}

absl::StatusOr<bool> Subprocess::Reap(int options) {
  if (exit_status_.has_value()) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, options);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    return absl::InternalError(
        absl::StrCat("waitpid for '", program_, "' (pid ", pid_, "): ", std::strerror(errno)));
  }
  if (r == 0) return false;  // WNOHANG and still running
  exit_status_ = WIFEXITED(status) ? ExitStatus{true, WEXITSTATUS(status), 0}
                                   : ExitStatus{false, 0, WTERMSIG(status)};
  return true;
}

absl::StatusOr<ExitStatus> Subprocess::Wait(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) {
    absl::StatusOr<bool> ended = Reap(0);
    if (!ended.ok()) return ended.status();
    return *exit_status_;
  }
  // Polling with a growing pause (1 ms .. 50 ms) rather than SIGCHLD or pidfd: no process-wide
  // signal handler, works on any kernel, and the latency is well below what tests care about.
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    absl::StatusOr<bool> ended = Reap(WNOHANG);
    if (!ended.ok()) return ended.status();
    if (*ended) return *exit_status_;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "'", program_, "' (pid ", pid_, ") still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
}

absl::Status Subprocess::Signal(int signo) {
  if (exit_status_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot signal '", program_, "' (pid ", pid_,
                                                      "): it already ended (",
                                                      exit_status_->ToString(), ")"));
  }
  if (kill(pid_, signo) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("kill(", pid_, ", ", signo, ") for '", program_, "'"));
  }
  return absl::OkStatus();
}

bool Subprocess::running() {
  absl::StatusOr<bool> ended = Reap(WNOHANG);
  return ended.ok() && !*ended;
}

absl::StatusOr<std::string> WaitForFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> content = ReadFileToString(path);
    if (content.ok() && !content->empty() && content->back() == '\n') return content;
    if (absl::Now() >= deadline) {
      std::string seen = !content.ok() ? std::string(content.status().message())
                         : content->empty()
                             ? "it is empty"
                             : absl::StrCat("it holds '", *content, "' without a final newline");
      return absl::DeadlineExceededError(absl::StrCat("file '", path, "' not complete after ",
                                                      absl::FormatDuration(timeout), ": ", seen));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace tessera

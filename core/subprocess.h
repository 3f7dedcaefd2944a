// Subprocess: starts a child process (posix_spawnp), optionally redirecting its stdout and
// stderr to files, and waits for it, signals it or kills it. Used by the multi-process tests
// (several `tessera-ps` daemons and workers on loopback) and by the CLI's local launcher.
//
//   ASSIGN_OR_RETURN(auto ps, Subprocess::Start({.argv = {"tessera-ps", "--port_file=/tmp/p"}}));
//   ASSIGN_OR_RETURN(std::string port, WaitForFile("/tmp/p", absl::Seconds(10)));
//   ...
//   RETURN_IF_ERROR(ps->Signal(SIGTERM));
//   ASSIGN_OR_RETURN(ExitStatus status, ps->Wait(absl::Seconds(5)));
//
// Ownership: a Subprocess owns its child. The destructor SIGKILLs a child still running and
// reaps it, so dropping the object never leaves a zombie or a stray daemon. Only the direct
// child is signalled: a child that forks its own children (e.g. `sh -c 'a; b'`) must clean them
// up itself, or be started as `exec prog` / without a shell.
//
// Thread-safety: thread-compatible. One Subprocess is used by one thread at a time (Wait and
// running() update the cached exit status); different objects may be used concurrently.
// Nothing here installs a SIGCHLD handler; a process that sets SIGCHLD to SIG_IGN makes the
// kernel reap children itself, and Wait then reports INTERNAL (waitpid: ECHILD).
#ifndef TESSERA_CORE_SUBPROCESS_H_
#define TESSERA_CORE_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {

struct SubprocessOptions {
  // argv[0] is the program: a path, or a bare name looked up in PATH (posix_spawnp).
  std::vector<std::string> argv;
  // Added to, or overriding, the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Empty: the child inherits the parent's stream. Otherwise the file is created or truncated
  // and the stream written to it. stderr_path may equal stdout_path: both then share one file
  // (one open file description, so their writes interleave instead of overwriting each other).
  std::string stdout_path;
  std::string stderr_path;
};

// How a child ended: exited normally with `code`, or was killed by `signal`.
struct ExitStatus {
  bool exited = false;
  int code = 0;                  // valid when exited
  int signal = 0;                // valid when !exited
  std::string ToString() const;  // "exit code 3", "killed by signal 9"
};

class Subprocess {
 public:
  // Starts the child. Errors (INVALID_ARGUMENT for an empty argv, else the errno of the spawn,
  // e.g. NOT_FOUND for a missing program or an unwritable redirect) name argv[0] and the errno
  // text.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const SubprocessOptions& options);

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();  // SIGKILLs and reaps a child still running

  // The child's pid. After the child has been reaped the number may belong to another process.
  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for the child to end and returns how it ended (again on later calls).
  // DEADLINE_EXCEEDED, naming argv[0] and the pid, if it is still running. A stopped child
  // (SIGSTOP) counts as running.
  absl::StatusOr<ExitStatus> Wait(absl::Duration timeout = absl::InfiniteDuration());

  // Sends `signo` (SIGTERM, SIGKILL, SIGSTOP, SIGCONT, ...). FAILED_PRECONDITION once the child
  // has been reaped: its pid may already name another process.
  absl::Status Signal(int signo);

  // Non-blocking: true while the child has not ended. Reaps it if it has.
  bool running();

 private:
  Subprocess(pid_t pid, std::string program) : pid_(pid), program_(std::move(program)) {}

  // waitpid(pid_, options); records the status once the child has ended. Returns whether it
  // has ended.
  absl::StatusOr<bool> Reap(int options);

  const pid_t pid_;
  const std::string program_;              // argv[0], for messages
  std::optional<ExitStatus> exit_status_;  // set once reaped
};

// Polls until `path` exists, is non-empty and ends with '\n' (a writer that ends with a
// newline has then written it completely), and returns its content. DEADLINE_EXCEEDED naming
// the path (and what it last held) after `timeout`. Used to wait for a daemon's port file.
absl::StatusOr<std::string> WaitForFile(const std::string& path, absl::Duration timeout);

}  // namespace tessera

#endif  // TESSERA_CORE_SUBPROCESS_H_

// What every Tessera daemon's main() needs around its gRPC server: its flags parsed, with
// --help listing them; SIGTERM/SIGINT turned
// into a call (a thread waits for them; signal handlers could not shut gRPC down), and the
// bound port written to a file for whoever started it on port 0 (tests, launchers).
#ifndef TESSERA_CORE_DAEMON_H_
#define TESSERA_CORE_DAEMON_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace tessera {

// Sets the daemon's usage line and parses its flags. --help (and --helpfull) list every flag
// Tessera itself defines, wherever it is defined; absl alone would list only those of a
// source file named after the program, none here. Then ReportCrashes(argv[0]) and
// ApplyMutexDeadlockDetectionFlag().
void ParseDaemonFlags(int argc, char** argv, const char* usage);

// Turns abseil's lock-order cycle detection off unless --mutex_deadlock_detection is set.
// Debian builds abseil without NDEBUG, so there every absl::Mutex lock (gRPC's locks are
// absl's) also records the lock order in a process-wide graph under a global lock, about 3x
// an uncontended lock's cost, and a cycle in that history aborts the process even where no
// deadlock can occur. Test binaries, which do not call this, keep it as the debugging aid it
// is; daemons and the programs that stand for them in benches call it after their flags.
void ApplyMutexDeadlockDetectionFlag();

// A daemon that dies of a fatal signal (a crash, or abort: an uncaught exception, a failed
// check) writes the signal and its thread's symbolized stack to stderr first, which the
// cluster keeps (a pod's log), so that a crash seen once can be found.
void ReportCrashes(const char* argv0);

// Blocks SIGTERM and SIGINT in this and every thread started later, and starts a detached
// thread that calls `on_signal(signo)` once the first of them arrives. Call early in main(),
// before other threads start.
void OnTerminationSignal(std::function<void(int signo)> on_signal);

// Asks the kernel for SIGTERM when the process that started this one (pid `parent`) dies, so
// that a daemon of a local cluster stops with its launcher even after a SIGKILL instead of
// living on orphaned; SIGTERM at once when `parent` is already gone. Call after
// OnTerminationSignal (the signal then stops the daemon gracefully). `parent` <= 0: nothing.
void StopWithParent(int parent);

// Writes "<port>\n" to `path` through a temporary file and a rename, so a reader never sees
// a partial file. INTERNAL naming the path on failure.
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace tessera

#endif  // TESSERA_CORE_DAEMON_H_

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
// source file named after the program, none here. Then ReportCrashes(argv[0]).
void ParseDaemonFlags(int argc, char** argv, const char* usage);

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

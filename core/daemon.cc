#include "core/daemon.h"

#include <execinfo.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/debugging/symbolize.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/file.h"

ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "abort when abseil's mutexes are taken in an order that could deadlock (a debugging "
          "aid: it takes a process-wide lock on every lock)");

namespace tessera {

void ParseDaemonFlags(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  // Tessera's flags are defined in its own files, named relative to the workspace; absl's
  // (--flagfile, --fromenv ...) in its library's, absolute.
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StartsWith(file, "/") && !absl::StrContains(file, "absl/");
  };
  absl::SetFlagsUsageConfig(config);
  absl::ParseCommandLine(argc, argv);
  ReportCrashes(argv[0]);
  ApplyMutexDeadlockDetectionFlag();
}

void ApplyMutexDeadlockDetectionFlag() {
  absl::SetMutexDeadlockDetectionMode(absl::GetFlag(FLAGS_mutex_deadlock_detection)
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
}

namespace {

constexpr int kFatalSignals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};

void Write(const char* text) { (void)!write(STDERR_FILENO, text, strlen(text)); }

// Async-signal-safe, as far as a dying process needs: write(2), glibc's backtrace (loaded
// before, by ReportCrashes) and absl::Symbolize, which allocates nothing. glibc's backtrace
// unwinds by the DWARF tables, through libc and libstdc++'s frames, which absl's own failure
// handler cannot (it follows frame pointers, and Debian builds those libraries without).
void OnFatalSignal(int signo) {
  char line[1024];
  snprintf(line, sizeof(line), "*** SIG%s (%s); the stack of the thread it hit:\n",
           sigabbrev_np(signo), sigdescr_np(signo));
  Write(line);
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 1; i < n; ++i) {  // frame 0 is this handler
    char symbol[768];
    if (!absl::Symbolize(static_cast<char*>(frames[i]) - 1, symbol, sizeof(symbol))) {
      strcpy(symbol, "(unknown)");
    }
    snprintf(line, sizeof(line), "    @ %p  %s\n", frames[i], symbol);
    Write(line);
  }
  signal(signo, SIG_DFL);
  raise(signo);
}

}  // namespace

void ReportCrashes(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  void* warm[1];
  (void)backtrace(warm, 1);  // its first call loads libgcc_s, which a signal handler must not
  for (int signo : kFatalSignals) {
    struct sigaction action = {};
    action.sa_handler = OnFatalSignal;
    action.sa_flags = SA_RESETHAND | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(signo, &action, nullptr);
  }
}

void OnTerminationSignal(std::function<void(int signo)> on_signal) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals, on_signal = std::move(on_signal)] {
    int signo = 0;
    sigwait(&signals, &signo);
    on_signal(signo);
  }).detach();
}

absl::Status WritePortFile(const std::string& path, int port) {
  return Annotate(WriteFileAtomically(path, absl::StrCat(port, "\n")), "the port file");
}

void StopWithParent(int parent) {
  if (parent <= 0) return;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The parent may have died before the request: then it will never be signalled.
  if (getppid() != parent) kill(getpid(), SIGTERM);
}

}  // namespace tessera

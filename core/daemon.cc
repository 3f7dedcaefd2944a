#include "core/daemon.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"

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

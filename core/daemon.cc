#include "core/daemon.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/file.h"

namespace tessera {

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

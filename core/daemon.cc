#include "core/daemon.h"

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write the port file ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace tessera

#include "core/daemon.h"

#include <cerrno>
#include <system_error>
#include <thread>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// What the worker daemon once died of, unexplained: an exception no one caught.
[[gnu::noinline]] void ThrowUncaughtSystemError() {
  throw std::system_error(EINVAL, std::generic_category());
}

TEST(DaemonTest, ACrashWritesItsSignalAndTheThrowersStack) {
  EXPECT_DEATH(
      {
        ReportCrashes("daemon_test");
        std::thread(ThrowUncaughtSystemError).join();  // gtest would catch it on this one
      },
      "SIGABRT(.|\n)*ThrowUncaughtSystemError");
}

}  // namespace
}  // namespace tessera

#include "core/daemon.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
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

// Takes two mutexes in one order and then in the other: a cycle in the lock order that abseil's
// detection (on in Debian's build) aborts on, though nothing deadlocks on one thread.
void LockInBothOrders() {
  absl::Mutex a, b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  absl::MutexLock lb(&b);
  absl::MutexLock la(&a);
}

// A daemon's start with `flag` (or none), then the two orders.
void StartDaemonAndLockInBothOrders(const char* flag) {
  std::vector<std::string> args = {"daemon_test"};
  if (flag != nullptr) args.push_back(flag);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ParseDaemonFlags(static_cast<int>(args.size()), argv.data(), "daemon_test");
  LockInBothOrders();
}

TEST(DaemonTest, DaemonsDoNotPayForLockOrderChecksUnlessAsked) {
  EXPECT_EXIT(
      {
        StartDaemonAndLockInBothOrders(nullptr);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_DEATH(StartDaemonAndLockInBothOrders("--mutex_deadlock_detection"),
               "Potential Mutex deadlock");
}

}  // namespace
}  // namespace tessera

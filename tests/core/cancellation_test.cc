// core/cancellation.h: callbacks run once at Cancel, never after their registration is
// dropped, and at once when registered late; randomized against what each thread saw.
#include "core/cancellation.h"

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(CancellationTest, RequestStopOnlyFlagsAndCancelRunsCallbacksOnce) {
  Cancellation c;
  int runs = 0;
  auto registration = c.OnCancel([&] { ++runs; });
  EXPECT_FALSE(c.cancelled());
  c.RequestStop();
  EXPECT_TRUE(c.cancelled());
  EXPECT_EQ(runs, 0);
  c.Cancel();
  c.Cancel();
  EXPECT_EQ(runs, 1);
  // Registered after the fact: runs at once.
  auto late = c.OnCancel([&] { ++runs; });
  EXPECT_EQ(runs, 2);
}

TEST(CancellationTest, ADroppedRegistrationNeverRuns) {
  Cancellation c;
  int runs = 0;
  c.OnCancel([&] { ++runs; }).reset();
  c.Cancel();
  EXPECT_EQ(runs, 0);
}

// Threads register, sometimes drop, and check: a callback runs iff its registration was
// alive when Cancel came (or was made after it), exactly once, and never once dropped.
TEST(CancellationTest, ConcurrentRegistrationsMatchWhatEachSaw) {
  for (int trial = 0; trial < 50; ++trial) {
    Cancellation c;
    constexpr int kThreads = 4, kPerThread = 50;
    std::vector<std::atomic<int>> runs(kThreads * kPerThread);
    std::vector<std::thread> threads;
    std::atomic<bool> go{false};
    std::vector<int> dropped_before_cancel(kThreads * kPerThread, 0);
    std::vector<int> kept_ids(kThreads * kPerThread, 0);
    std::vector<std::vector<std::unique_ptr<Cancellation::Registration>>> kept(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(trial * 100 + t);
        while (!go) std::this_thread::yield();
        for (int i = 0; i < kPerThread; ++i) {
          const int id = t * kPerThread + i;
          auto registration = c.OnCancel([&runs, id] { ++runs[id]; });
          if (rng() % 2 == 0) {
            const bool cancelled_before = c.cancelled();
            registration.reset();
            // Dropped while not yet cancelled and Cancel had not started: must never run.
            if (!cancelled_before && runs[id] == 0) dropped_before_cancel[id] = 1;
          } else {
            kept_ids[id] = 1;  // alive past Cancel
            kept[t].push_back(std::move(registration));
          }
        }
      });
    }
    go = true;
    std::this_thread::sleep_for(std::chrono::microseconds(50 * (trial % 5)));
    c.Cancel();
    for (auto& thread : threads) thread.join();
    for (int id = 0; id < kThreads * kPerThread; ++id) {
      EXPECT_LE(runs[id], 1) << id;
      if (dropped_before_cancel[id]) EXPECT_EQ(runs[id], 0) << id;
      if (kept_ids[id]) EXPECT_EQ(runs[id], 1) << id;
    }
  }
}

}  // namespace
}  // namespace tessera

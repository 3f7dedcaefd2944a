// RingQueue against std::deque: random runs of pushes and pops across growth, wrap-around
// and the release of a drained large ring.
#include "engine/internal/ring_queue.h"

#include <deque>
#include <random>

#include "gtest/gtest.h"

namespace tessera::engine::internal {
namespace {

TEST(RingQueueTest, MatchesADequeOverRandomPushesAndPops) {
  std::mt19937 rng(7);
  RingQueue<int> ring;
  std::deque<int> oracle;
  int next = 0;
  for (int round = 0; round < 2000; ++round) {
    // Bursts of up to 300 pushes then up to 300 pops: the ring grows, wraps and drains.
    const int pushes = static_cast<int>(rng() % 300), pops = static_cast<int>(rng() % 300);
    for (int i = 0; i < pushes; ++i) {
      ring.push_back(next);
      oracle.push_back(next++);
    }
    for (int i = 0; i < pops && !oracle.empty(); ++i) {
      ASSERT_EQ(ring.front(), oracle.front()) << "round " << round;
      ring.pop_front();
      oracle.pop_front();
    }
    ASSERT_EQ(ring.size(), oracle.size());
    ASSERT_EQ(ring.empty(), oracle.empty());
  }
  while (!oracle.empty()) {
    ASSERT_EQ(ring.front(), oracle.front());
    ring.pop_front();
    oracle.pop_front();
  }
  EXPECT_TRUE(ring.empty());
}

TEST(RingQueueTest, KeepsSmallStorageAndReleasesALargeDrainedOne) {
  RingQueue<int> ring;
  for (int i = 0; i < 100; ++i) ring.push_back(i);
  const size_t small = ring.capacity();
  for (int i = 0; i < 100; ++i) ring.pop_front();
  EXPECT_EQ(ring.capacity(), small);  // reused by the next burst
  // One item at a time (a dependency chain): the ring never grows.
  for (int i = 0; i < 10 * static_cast<int>(small); ++i) {
    ring.push_back(i);
    ASSERT_EQ(ring.front(), i);
    ring.pop_front();
  }
  EXPECT_EQ(ring.capacity(), small);
  for (int i = 0; i < 100000; ++i) ring.push_back(i);
  EXPECT_GE(ring.capacity(), 100000u);
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(ring.front(), i);
    ring.pop_front();
  }
  EXPECT_EQ(ring.capacity(), 0u);  // a burst's memory goes back once drained
  ring.push_back(5);
  EXPECT_EQ(ring.front(), 5);
}

}  // namespace
}  // namespace tessera::engine::internal

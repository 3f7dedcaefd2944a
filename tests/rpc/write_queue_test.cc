#include "rpc/write_queue.h"

#include <algorithm>
#include <climits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::rpc {
namespace {

TEST(WriteQueueTest, HigherPriorityFirstThenInOrderAndTheLastMessageLast) {
  WriteQueue<int> q;
  q.PushLast(99);
  q.Push(1, 0);
  q.Push(2, -3);
  q.Push(3, 5);
  q.Push(4, 0);
  q.Push(5, INT_MIN);
  q.Push(6, INT_MAX);
  std::vector<int> popped;
  while (!q.empty()) popped.push_back(q.Pop());
  EXPECT_EQ(popped, (std::vector<int>{6, 3, 1, 4, 2, 5, 99}));
}

// Pushes and pops interleaved at random against a sequential oracle: a list searched for the
// highest priority, first pushed among equals.
TEST(WriteQueueTest, RandomPushesAndPopsMatchTheOracle) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    WriteQueue<int> q;
    struct Entry {
      int priority;
      int value;
    };
    std::vector<Entry> oracle;
    int next = 0;
    for (int step = 0; step < 400; ++step) {
      if (oracle.empty() || rng() % 3 != 0) {
        const int priority = static_cast<int>(rng() % 7) - 3;
        q.Push(next, priority);
        oracle.push_back({priority, next++});
        continue;
      }
      auto best = std::max_element(oracle.begin(), oracle.end(), [](const Entry& a, const Entry& b) {
        return a.priority < b.priority;  // max_element keeps the first of equals
      });
      ASSERT_EQ(q.Pop(), best->value) << "trial " << trial << " step " << step;
      oracle.erase(best);
      ASSERT_EQ(q.size(), oracle.size());
    }
    q.Clear();
    EXPECT_TRUE(q.empty());
  }
}

}  // namespace
}  // namespace tessera::rpc

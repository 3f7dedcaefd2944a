// TaskQueue on its own: the order it hands items out in (against a sequential oracle, with
// run-ahead batches and worker-local pushes in play), stealing from a worker that holds a
// batch, and exactly-once delivery with concurrent pushers and workers (also run under
// ThreadSanitizer).
#include "engine/internal/task_queue.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::engine::internal {
namespace {

struct Item {
  int id = 0;
  int priority = 0;
};

// The order the queue promises one worker: highest priority first, then push order.
class Oracle {
 public:
  void Push(const Item* item) { pending_.emplace(std::make_pair(-item->priority, item->id), item); }
  const Item* Pop() {
    auto first = pending_.begin();
    const Item* item = first->second;
    pending_.erase(first);
    return item;
  }
  bool empty() const { return pending_.empty(); }

 private:
  std::map<std::pair<int, int>, const Item*> pending_;  // (-priority, push order)
};

TEST(TaskQueueTest, OneWorkerSeesPriorityThenPushOrderDespiteBatches) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    TaskQueue<Item> queue(/*spin_us=*/0, /*workers=*/1);
    Oracle oracle;
    std::vector<std::unique_ptr<Item>> items;
    int outstanding = 0;
    for (int step = 0; step < 2000; ++step) {
      // Bursts of pushes build backlogs, so the worker takes batches and later pushes,
      // some more urgent, land while a batch is buffered.
      const bool push = outstanding == 0 || rng() % 100 < 55;
      if (push) {
        items.push_back(std::make_unique<Item>(
            Item{static_cast<int>(items.size()), static_cast<int>(rng() % 4)}));
        // Now and then the worker itself pushes, as a completing worker does: kept on the
        // worker only when nothing else is ready, so the oracle's order still holds.
        if (rng() % 4 != 0 ||
            !queue.PushIfIdle(0, items.back().get(), items.back()->priority)) {
          queue.Push(items.back().get(), items.back()->priority);
        } else {
          ASSERT_EQ(outstanding, 0) << "PushIfIdle took an item while others were ready";
        }
        oracle.Push(items.back().get());
        ++outstanding;
      } else {
        const Item* got = queue.Pop(0);
        const Item* want = oracle.Pop();
        ASSERT_EQ(got->id, want->id) << "round " << round << " step " << step << ": got priority "
                                     << got->priority << ", expected priority " << want->priority;
        --outstanding;
      }
    }
    while (!oracle.empty()) ASSERT_EQ(queue.Pop(0)->id, oracle.Pop()->id);
  }
}

TEST(TaskQueueTest, AnIdleWorkerStealsFromAPeerHoldingABatch) {
  TaskQueue<Item> queue(/*spin_us=*/0, /*workers=*/2);
  std::vector<Item> items(32);
  for (int i = 0; i < 32; ++i) {
    items[i].id = i;
    queue.Push(&items[i], 0);
  }
  // Worker 0 takes its share (half the backlog) and then "blocks" in its first item.
  ASSERT_EQ(queue.Pop(0)->id, 0);
  // Worker 1 must still get every other item: the shared rest, then worker 0's batch.
  std::vector<int> seen;
  for (int i = 0; i < 31; ++i) seen.push_back(queue.Pop(1)->id);
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < 31; ++i) EXPECT_EQ(seen[i], i + 1);
  EXPECT_EQ(queue.TryPopNow(), nullptr);
}

TEST(TaskQueueTest, PushIfIdleKeepsTheItemOnItsWorkerOnlyWhenNothingElseIsReady) {
  TaskQueue<Item> queue(/*spin_us=*/0, /*workers=*/2);
  std::vector<Item> items(8);
  for (int i = 0; i < 8; ++i) items[i].id = i;
  // Nothing ready: the item goes to worker 0, not to the shared queue.
  ASSERT_TRUE(queue.PushIfIdle(0, &items[0], 0));
  EXPECT_EQ(queue.TryPopNow(), nullptr);
  EXPECT_EQ(queue.Pop(0)->id, 0);
  // The shared queue holds an item: refused, so the queued one is not overtaken.
  queue.Push(&items[1], 0);
  EXPECT_FALSE(queue.PushIfIdle(0, &items[2], 0));
  EXPECT_EQ(queue.Pop(0)->id, 1);
  // A more urgent item pushed after it still runs first.
  ASSERT_TRUE(queue.PushIfIdle(0, &items[3], 0));
  queue.Push(&items[4], 5);
  EXPECT_EQ(queue.Pop(0)->id, 4);
  EXPECT_EQ(queue.Pop(0)->id, 3);
  // The worker's buffer holds an item: refused.
  ASSERT_TRUE(queue.PushIfIdle(0, &items[5], 0));
  EXPECT_FALSE(queue.PushIfIdle(0, &items[6], 0));
  // An idle peer takes the kept item (its owner might be blocked in a long function).
  EXPECT_EQ(queue.Pop(1)->id, 5);
}

TEST(TaskQueueTest, ConcurrentPushersAndWorkersDeliverEachItemOnce) {
  constexpr int kPushers = 2, kWorkers = 3, kPerPusher = 20000;
  TaskQueue<Item> queue(/*spin_us=*/20, kWorkers);
  // Items [0, n) come from the pushers; item n + i continues item i (i % 4 == 0) from the
  // worker that ran it, as a completing worker does.
  constexpr int kPushed = kPushers * kPerPusher;
  std::vector<Item> items(kPushed + kPushed / 4);
  std::vector<std::atomic<int>> seen(items.size());
  // Records `item`; returns its continuation, if it has one.
  auto run = [&](const Item* item) -> Item* {
    seen[item->id].fetch_add(1, std::memory_order_relaxed);
    if (item->id >= kPushed || item->id % 4 != 0) return nullptr;
    Item* next = &items[kPushed + item->id / 4];
    next->id = kPushed + item->id / 4;
    return next;
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      while (Item* item = queue.Pop(w)) {
        if (Item* next = run(item); next != nullptr && !queue.PushIfIdle(w, next, 0)) {
          queue.Push(next, 0);
        }
      }
    });
  }
  std::vector<std::thread> pushers;
  for (int p = 0; p < kPushers; ++p) {
    pushers.emplace_back([&, p] {
      std::mt19937 rng(p);
      for (int i = 0; i < kPerPusher; ++i) {
        Item& item = items[p * kPerPusher + i];
        item.id = p * kPerPusher + i;
        item.priority = static_cast<int>(rng() % 3);
        queue.Push(&item, item.priority);
        if (rng() % 512 == 0) std::this_thread::yield();  // let the queue run dry now and then
      }
    });
  }
  // A helper that pops alongside the workers, as WaitForAll does.
  std::thread helper([&] {
    for (int i = 0; i < 2000; ++i) {
      if (Item* item = queue.TryPopNow()) {
        if (Item* next = run(item)) queue.Push(next, 0);  // not a worker: no PushIfIdle
      }
    }
  });
  for (auto& t : pushers) t.join();
  helper.join();
  queue.Shutdown();  // workers drain everything, then Pop returns null
  for (auto& t : workers) t.join();
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

}  // namespace
}  // namespace tessera::engine::internal

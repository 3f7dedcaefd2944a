// KeySlots and SlotBudget on their own: page-aligned slots per rank that another mapping of
// the region sees, and a budget that refuses small keys and keeps to its regions and bytes.
#include "kvstore/internal/key_slots.h"

#include <cstring>

#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace tessera::kvstore {
namespace {

using ::tessera::testing::IsOk;

TEST(KeySlotsTest, EachRankHasAPageAlignedSlotThatAnotherMappingSees) {
  SlotBudget budget(0, {.enabled = true, .min_key_bytes = 16, .max_bytes = 1 << 20, .max_keys = 4});
  std::optional<KeySlots> slots = budget.Share(/*key_id=*/3, /*key_bytes=*/5000, /*num_workers=*/3);
  ASSERT_TRUE(slots.has_value());
  EXPECT_EQ(slots->key_bytes(), 5000u);
  EXPECT_EQ(slots->offset(0), 0u);
  EXPECT_EQ(slots->offset(1), 8192u);  // 5000 bytes rounded up to pages
  EXPECT_EQ(slots->offset(2), 16384u);
  EXPECT_EQ(slots->view(2).size(), 5000u);
  std::memset(slots->slot(2), 0x5a, 5000);
  // As a worker maps its slot.
  absl::StatusOr<SharedMemory> worker = SharedMemory::Open(slots->path(), slots->offset(2), 5000);
  ASSERT_THAT(worker, IsOk());
  EXPECT_EQ(static_cast<unsigned char>(worker->data()[4999]), 0x5a);
  worker->data()[0] = 7;
  EXPECT_EQ(slots->view(2)[0], 7);
  EXPECT_EQ(slots->view(1)[0], 0);
}

TEST(KeySlotsTest, TheBudgetRefusesSmallKeysAndKeepsToItsRegionsAndBytes) {
  SlotBudget off(0, {.enabled = false, .min_key_bytes = 0, .max_bytes = 1 << 20, .max_keys = 4});
  EXPECT_FALSE(off.Share(0, 4096, 2).has_value());
  SlotBudget budget(0,
                    {.enabled = true, .min_key_bytes = 64, .max_bytes = 5 * 4096, .max_keys = 2});
  EXPECT_FALSE(budget.Share(0, 63, 2).has_value());     // travels on the stream
  EXPECT_TRUE(budget.Share(1, 64, 2).has_value());      // 2 pages
  EXPECT_FALSE(budget.Share(2, 4097, 2).has_value());   // 4 more pages: over the bytes
  EXPECT_TRUE(budget.Share(3, 4096, 2).has_value());    // 2 more: 4 of 5
  EXPECT_FALSE(budget.Share(4, 64, 1).has_value());     // a third region
  budget.Reset();
  EXPECT_TRUE(budget.Share(5, 4096, 2).has_value());
}

}  // namespace
}  // namespace tessera::kvstore

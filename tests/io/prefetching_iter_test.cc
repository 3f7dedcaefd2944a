// PrefetchingIter: the same batches, order and errors as the wrapped iterator, across
// epochs and mid-epoch resets; really `depth` batches ahead; safe to destroy with a fetch in
// flight. Repeated to shake out races (and run under --config=tsan).
#include "io/prefetching_iter.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/ndarray_iter.h"
#include "tests/io/io_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::IsOkAndHolds;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;

// Batches with only an index (k, k+1), counting Next calls; fails at batch `fail_at`.
class FakeIter : public DataIter {
 public:
  FakeIter(int batches, int fail_at, std::chrono::milliseconds delay)
      : batches_(batches), fail_at_(fail_at), delay_(delay) {}
  absl::Status Reset() override {
    pos_ = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Next() override {
    calls_.fetch_add(1, std::memory_order_relaxed);  // only counted, never ordered against
    std::this_thread::sleep_for(delay_);
    if (pos_ == fail_at_) return absl::DataLossError("fake failure at batch 2");
    if (pos_ == batches_) return false;
    value_.index = {2 * pos_, 2 * pos_ + 1};
    ++pos_;
    return true;
  }
  const DataBatch& Value() const override { return value_; }
  std::vector<DataDesc> provide_data() const override { return {{"data", Shape{2, 5}}}; }
  std::vector<DataDesc> provide_label() const override { return {}; }
  int batch_size() const override { return 2; }
  int calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  const int batches_, fail_at_;
  const std::chrono::milliseconds delay_;
  int pos_ = 0;
  DataBatch value_;
  std::atomic<int> calls_{0};
};

class PrefetchingIterTest : public ::tessera::testing::EngineTest {
 protected:
  std::unique_ptr<NDArrayIter> Make() {
    auto it = NDArrayIter::Create(rt(), MakeRows(rt(), 11, 3), MakeLabels(rt(), 11),
                                  NDArrayIterOptions{3, true, 4, "pad"});
    EXPECT_THAT(it, IsOk());
    return std::move(it).value();
  }
};
TESSERA_INSTANTIATE_ENGINES(PrefetchingIterTest);

TEST_P(PrefetchingIterTest, SameBatchesAsTheWrappedIterator) {
  for (int repeat = 0; repeat < 12; ++repeat) {
    auto reference = Make();
    PrefetchingIter prefetching(Make(), /*depth=*/1 + repeat % 4);
    EXPECT_EQ(prefetching.batch_size(), 3);
    EXPECT_EQ(prefetching.num_batches(), 4);  // 11 samples, "pad"
    EXPECT_EQ(prefetching.provide_data()[0].shape, (Shape{3, 3}));
    EXPECT_EQ(prefetching.provide_label()[0].name, "softmax_label");
    for (int epoch = 0; epoch < 3; ++epoch) {
      auto want = Epoch(*reference);
      auto got = Epoch(prefetching);  // also checks each row against its index
      ASSERT_EQ(got.size(), want.size());
      for (size_t b = 0; b < got.size(); ++b) {
        EXPECT_EQ(got[b].ids, want[b].ids);
        EXPECT_EQ(got[b].pad, want[b].pad);
      }
      if (epoch == 1) {  // a mid-epoch reset discards the batch fetched ahead
        ASSERT_THAT(reference->Reset(), IsOk());
        ASSERT_THAT(prefetching.Reset(), IsOk());
        ASSERT_THAT(reference->Next(), IsOkAndHolds(true));
        ASSERT_THAT(prefetching.Next(), IsOkAndHolds(true));
        EXPECT_EQ(prefetching.Value().index, reference->Value().index);
      }
      ASSERT_THAT(reference->Reset(), IsOk());
      ASSERT_THAT(prefetching.Reset(), IsOk());
    }
  }
}

TEST(PrefetchingIterFakeTest, FetchesOneBatchAhead) {
  auto owned = std::make_unique<FakeIter>(5, -1, std::chrono::milliseconds(0));
  FakeIter* fake = owned.get();  // not owned
  PrefetchingIter it(std::move(owned));
  ASSERT_THAT(it.Next(), IsOkAndHolds(true));
  EXPECT_EQ(it.Value().index, (std::vector<int64_t>{0, 1}));
  // The second batch is fetched without another Next() from us.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fake->calls() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(fake->calls(), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(fake->calls(), 2);  // and no more than one ahead
}

TEST(PrefetchingIterFakeTest, FetchesDepthBatchesAhead) {
  auto owned = std::make_unique<FakeIter>(10, -1, std::chrono::milliseconds(0));
  FakeIter* fake = owned.get();  // not owned
  PrefetchingIter it(std::move(owned), /*depth=*/3);
  ASSERT_THAT(it.Next(), IsOkAndHolds(true));
  EXPECT_EQ(it.Value().index, (std::vector<int64_t>{0, 1}));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fake->calls() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(fake->calls(), 4);  // the one taken and three waiting
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(fake->calls(), 4);
  for (int64_t b = 1; b < 10; ++b) {
    ASSERT_THAT(it.Next(), IsOkAndHolds(true));
    EXPECT_EQ(it.Value().index, (std::vector<int64_t>{2 * b, 2 * b + 1}));
  }
  EXPECT_THAT(it.Next(), IsOkAndHolds(false));
  EXPECT_EQ(fake->calls(), 11);  // nothing fetched past the end
}

TEST(PrefetchingIterFakeTest, ErrorsAndEndAreHandedOver) {
  PrefetchingIter it(std::make_unique<FakeIter>(5, 2, std::chrono::milliseconds(1)));
  ASSERT_THAT(it.Next(), IsOkAndHolds(true));
  ASSERT_THAT(it.Next(), IsOkAndHolds(true));
  EXPECT_THAT(it.Next(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("batch 2")));
  ASSERT_THAT(it.Reset(), IsOk());
  ASSERT_THAT(it.Next(), IsOkAndHolds(true));
  EXPECT_EQ(it.Value().index, (std::vector<int64_t>{0, 1}));

  PrefetchingIter short_iter(std::make_unique<FakeIter>(1, -1, std::chrono::milliseconds(0)));
  ASSERT_THAT(short_iter.Next(), IsOkAndHolds(true));
  EXPECT_THAT(short_iter.Next(), IsOkAndHolds(false));
  EXPECT_THAT(short_iter.Next(), IsOkAndHolds(false));
}

TEST(PrefetchingIterFakeTest, DestroyedWithAFetchInFlight) {
  for (int repeat = 0; repeat < 20; ++repeat) {
    PrefetchingIter it(std::make_unique<FakeIter>(100, -1, std::chrono::milliseconds(repeat % 3)),
                       /*depth=*/1 + repeat % 3);
    if (repeat % 2) {
      ASSERT_THAT(it.Next(), IsOkAndHolds(true));
    }
  }  // the destructor waits for the fetch and joins
}

}  // namespace
}  // namespace tessera::io

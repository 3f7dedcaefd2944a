// NDArrayIter: MXNet's last_batch_handle semantics (pad, discard, roll_over), shuffling
// reproducible from (seed, epoch), batch contents against the source rows, and errors.
// Also the documented permutation itself (golden values shared with tools/fetch_mnist.py).
#include "io/ndarray_iter.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/permutation.h"
#include "tests/io/io_test_util.h"
#include "tests/ndarray/test_util.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Ids = std::vector<int64_t>;

class NDArrayIterTest : public ::tessera::testing::EngineTest {
 protected:
  // n samples: data row i is (i*10, i*10+1, i*10+2), label i is i (int32).
  std::unique_ptr<NDArrayIter> Make(int n, NDArrayIterOptions options) {
    auto it = NDArrayIter::Create(rt(), MakeRows(rt(), n, 3), MakeLabels(rt(), n), options);
    EXPECT_THAT(it, IsOk());
    return it.ok() ? std::move(it).value() : nullptr;
  }
};
TESSERA_INSTANTIATE_ENGINES(NDArrayIterTest);

NDArrayIterOptions Opts(int batch_size, const char* last, bool shuffle = false, uint64_t seed = 0) {
  return {batch_size, shuffle, seed, last};
}

TEST(PermutationTest, GoldenValuesAndProperties) {
  // The same numbers come out of tools/fetch_mnist.py's sample_permutation.
  EXPECT_THAT(SamplePermutation(10, 0, 0), ElementsAre(6, 3, 2, 9, 8, 1, 4, 7, 0, 5));
  EXPECT_THAT(SamplePermutation(10, 7, 3), ElementsAre(4, 8, 3, 2, 6, 7, 0, 1, 9, 5));
  EXPECT_THAT(SamplePermutation(1, 5, 5), ElementsAre(0));
  EXPECT_TRUE(SamplePermutation(0, 5, 5).empty());
  for (uint64_t epoch = 0; epoch < 5; ++epoch) {
    Ids p = SamplePermutation(1000, 42, epoch);
    EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 1000u);
    EXPECT_EQ(*std::max_element(p.begin(), p.end()), 999);
    EXPECT_EQ(p, SamplePermutation(1000, 42, epoch));
    EXPECT_NE(p, SamplePermutation(1000, 42, epoch + 1));
    EXPECT_NE(p, SamplePermutation(1000, 43, epoch));
  }
}

TEST_P(NDArrayIterTest, PadWrapsAroundAndCountsPadding) {
  auto it = Make(10, Opts(4, "pad"));
  ASSERT_NE(it, nullptr);
  EXPECT_EQ(it->num_batches(), 3);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto batches = Epoch(*it);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_THAT(batches[0].ids, ElementsAre(0, 1, 2, 3));
    EXPECT_THAT(batches[1].ids, ElementsAre(4, 5, 6, 7));
    EXPECT_THAT(batches[2].ids, ElementsAre(8, 9, 0, 1));
    EXPECT_EQ(batches[0].pad, 0);
    EXPECT_EQ(batches[2].pad, 2);
    ASSERT_THAT(it->Reset(), IsOk());
  }
  // After the end, Next keeps saying false.
  Epoch(*it);
  EXPECT_THAT(it->Next(), ::tessera::testing::IsOkAndHolds(false));
}

TEST_P(NDArrayIterTest, DiscardDropsTheIncompleteBatch) {
  auto it = Make(10, Opts(4, "discard"));
  ASSERT_NE(it, nullptr);
  EXPECT_EQ(it->num_batches(), 2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto batches = Epoch(*it);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_THAT(batches[1].ids, ElementsAre(4, 5, 6, 7));
    ASSERT_THAT(it->Reset(), IsOk());
  }
}

TEST_P(NDArrayIterTest, RollOverStartsTheNextEpochWithTheLeftovers) {
  auto it = Make(10, Opts(4, "roll_over"));
  ASSERT_NE(it, nullptr);
  EXPECT_EQ(it->num_batches(), 2);  // the estimate: epoch 1 below yields 3
  auto e0 = Epoch(*it);
  ASSERT_EQ(e0.size(), 2u);
  EXPECT_THAT(e0[1].ids, ElementsAre(4, 5, 6, 7));
  ASSERT_THAT(it->Reset(), IsOk());
  auto e1 = Epoch(*it);  // 2 leftovers + 10 = 3 full batches, nothing left
  ASSERT_EQ(e1.size(), 3u);
  EXPECT_THAT(e1[0].ids, ElementsAre(8, 9, 0, 1));
  EXPECT_EQ(e1[0].pad, 0);  // real samples, not padding (MXNet would say 2)
  EXPECT_THAT(e1[1].ids, ElementsAre(2, 3, 4, 5));
  EXPECT_THAT(e1[2].ids, ElementsAre(6, 7, 8, 9));
  ASSERT_THAT(it->Reset(), IsOk());
  EXPECT_EQ(Epoch(*it).size(), 2u);  // as epoch 0 again
  // HardReset forgets the leftovers (8, 9).
  ASSERT_THAT(it->HardReset(), IsOk());
  auto e3 = Epoch(*it);
  ASSERT_EQ(e3.size(), 2u);
  EXPECT_THAT(e3[0].ids, ElementsAre(0, 1, 2, 3));
}

TEST_P(NDArrayIterTest, RollOverWithShuffleCarriesTheOldOrder) {
  auto it = Make(10, Opts(4, "roll_over", /*shuffle=*/true, /*seed=*/9));
  ASSERT_NE(it, nullptr);
  const Ids p0 = SamplePermutation(10, 9, 0), p1 = SamplePermutation(10, 9, 1);
  auto e0 = Epoch(*it);
  ASSERT_EQ(e0.size(), 2u);
  EXPECT_EQ(e0[0].ids, Ids(p0.begin(), p0.begin() + 4));
  ASSERT_THAT(it->Reset(), IsOk());
  auto e1 = Epoch(*it);
  ASSERT_EQ(e1.size(), 3u);
  EXPECT_THAT(e1[0].ids, ElementsAre(p0[8], p0[9], p1[0], p1[1]));
  EXPECT_THAT(e1[2].ids, ElementsAre(p1[6], p1[7], p1[8], p1[9]));
}

TEST_P(NDArrayIterTest, ExactMultipleGivesFullBatchesInEveryMode) {
  for (const char* mode : {"pad", "discard", "roll_over"}) {
    auto it = Make(8, Opts(4, mode));
    ASSERT_NE(it, nullptr);
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto batches = Epoch(*it);
      ASSERT_EQ(batches.size(), 2u) << mode;
      EXPECT_THAT(batches[0].ids, ElementsAre(0, 1, 2, 3)) << mode;
      EXPECT_EQ(batches[1].pad, 0) << mode;
      ASSERT_THAT(it->Reset(), IsOk());
    }
  }
}

TEST_P(NDArrayIterTest, FewerSamplesThanBatchSize) {
  auto pad = Make(2, Opts(5, "pad"));
  ASSERT_NE(pad, nullptr);
  auto batches = Epoch(*pad);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(batches[0].ids, ElementsAre(0, 1, 0, 1, 0));
  EXPECT_EQ(batches[0].pad, 3);
  auto roll = Make(3, Opts(5, "roll_over"));
  ASSERT_NE(roll, nullptr);
  EXPECT_TRUE(Epoch(*roll).empty());
  ASSERT_THAT(roll->Reset(), IsOk());
  batches = Epoch(*roll);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(batches[0].ids, ElementsAre(0, 1, 2, 0, 1));
  EXPECT_TRUE(Epoch(*Make(3, Opts(5, "discard"))).empty());
}

TEST_P(NDArrayIterTest, ShuffleIsReproducibleAndReshufflesEachEpoch) {
  auto a = Make(12, Opts(4, "pad", true, 5));
  auto b = Make(12, Opts(4, "pad", true, 5));
  auto c = Make(12, Opts(4, "pad", true, 6));
  ASSERT_TRUE(a && b && c);
  std::vector<Ids> orders;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    Ids order_a, order_b, order_c;
    for (const auto& batch : Epoch(*a))
      order_a.insert(order_a.end(), batch.ids.begin(), batch.ids.end());
    for (const auto& batch : Epoch(*b))
      order_b.insert(order_b.end(), batch.ids.begin(), batch.ids.end());
    for (const auto& batch : Epoch(*c))
      order_c.insert(order_c.end(), batch.ids.begin(), batch.ids.end());
    EXPECT_EQ(order_a, SamplePermutation(12, 5, epoch)) << "epoch " << epoch;
    EXPECT_EQ(order_a, order_b);
    EXPECT_NE(order_a, order_c);
    EXPECT_EQ(a->epoch(), epoch);
    orders.push_back(order_a);
    for (auto* it : {a.get(), b.get(), c.get()}) ASSERT_THAT(it->Reset(), IsOk());
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST_P(NDArrayIterTest, DescribesBatchesAndKeepsOldBatchesIntact) {
  auto it = Make(6, Opts(4, "pad"));
  ASSERT_NE(it, nullptr);
  ASSERT_EQ(it->provide_data().size(), 1u);
  EXPECT_EQ(it->provide_data()[0].name, "data");
  EXPECT_EQ(it->provide_data()[0].shape, (Shape{4, 3}));
  EXPECT_EQ(it->provide_data()[0].dtype, DType::kFloat32);
  ASSERT_EQ(it->provide_label().size(), 1u);
  EXPECT_EQ(it->provide_label()[0].name, "softmax_label");
  EXPECT_EQ(it->provide_label()[0].shape, (Shape{4}));
  EXPECT_EQ(it->provide_label()[0].dtype, DType::kInt32);
  EXPECT_EQ(it->batch_size(), 4);
  EXPECT_EQ(it->num_samples(), 6);

  ASSERT_THAT(it->Next(), ::tessera::testing::IsOkAndHolds(true));
  const DataBatch first = it->Value();
  ASSERT_THAT(it->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_EQ(it->Value().data[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(it->Value().data[0].ctx(), Context::CPU());
  auto old = first.data[0].AsVector<float>();
  ASSERT_THAT(old, IsOk());
  EXPECT_THAT(*old, ElementsAreArray<float>({0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}));
}

TEST_P(NDArrayIterTest, SeveralNamedArraysWithTheirDTypes) {
  auto x = FromVector<double>(rt(), Shape{3, 2, 2}, std::vector<double>(12, 1.5));
  auto y = FromVector<uint8_t>(rt(), Shape{3}, std::vector<uint8_t>{7, 8, 9});
  ASSERT_TRUE(x.ok() && y.ok());
  auto it = NDArrayIter::Create(rt(), {{"x", *x}, {"x_rows", MakeLabels(rt(), 3)}}, {{"y", *y}},
                                Opts(2, "discard"));
  ASSERT_THAT(it, IsOk());
  ASSERT_EQ((*it)->provide_data().size(), 2u);
  EXPECT_EQ((*it)->provide_data()[0].shape, (Shape{2, 2, 2}));
  EXPECT_EQ((*it)->provide_data()[0].dtype, DType::kFloat64);
  EXPECT_EQ((*it)->provide_data()[1].name, "x_rows");
  EXPECT_EQ((*it)->provide_label()[0].dtype, DType::kUInt8);
  ASSERT_THAT((*it)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_THAT((*it)->Value().label[0].AsVector<uint8_t>(),
              ::tessera::testing::IsOkAndHolds(ElementsAre(7, 8)));
  // No label at all is fine.
  auto unlabeled = NDArrayIter::Create(rt(), *x, NDArray(), Opts(3, "pad"));
  ASSERT_THAT(unlabeled, IsOk());
  EXPECT_TRUE((*unlabeled)->provide_label().empty());
  ASSERT_THAT((*unlabeled)->Next(), ::tessera::testing::IsOkAndHolds(true));
  EXPECT_TRUE((*unlabeled)->Value().label.empty());
}

TEST_P(NDArrayIterTest, Errors) {
  NDArray rows = MakeRows(rt(), 10, 3), labels = MakeLabels(rt(), 9);
  EXPECT_THAT(NDArrayIter::Create(rt(), rows, labels, Opts(4, "pad")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'data' has 10"), HasSubstr("'softmax_label' has 9"))));
  labels = MakeLabels(rt(), 10);
  for (int bad : {0, -3}) {
    EXPECT_THAT(NDArrayIter::Create(rt(), rows, labels, Opts(bad, "pad")),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size")));
  }
  EXPECT_THAT(NDArrayIter::Create(rt(), rows, labels, Opts(4, "wrap")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'wrap'")));
  EXPECT_THAT(NDArrayIter::Create(rt(), NDArray(), labels, Opts(4, "pad")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'data' is none")));
  EXPECT_THAT(NDArrayIter::Create(rt(), rows, labels, Opts(4, "pad"), "x", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("used twice")));
  EXPECT_THAT(NDArrayIter::Create(rt(), NDArrayIter::NamedArrays{}, {}, Opts(4, "pad")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no data")));
}

}  // namespace
}  // namespace tessera::io

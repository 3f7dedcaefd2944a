// NDArray basics: allocation, host copies for every dtype, views sharing storage, error
// cases, storage release through the engine.
#include "ndarray/ndarray.h"

#include <cstdint>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::IsOkAndHolds;
using testing::StatusIs;

class NDArrayTest : public testing::EngineTest {};
TESSERA_INSTANTIATE_ENGINES(NDArrayTest);

TEST_P(NDArrayTest, EmptyHasShapeDtypeContext) {
  auto a = NDArray::Empty(rt(), Shape{2, 3}, Context::CPU(), DType::kInt32);
  ASSERT_THAT(a, IsOk());
  EXPECT_FALSE(a->is_none());
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->dtype(), DType::kInt32);
  EXPECT_EQ(a->ctx(), Context::CPU());
  EXPECT_EQ(a->Size(), 6);
  EXPECT_EQ(a->data().Bytes(), 24u);
  EXPECT_TRUE(NDArray().is_none());
}

template <typename T>
void RoundTrip(const Runtime& rt) {
  std::vector<T> values;
  for (int i = 0; i < 12; ++i) values.push_back(static_cast<T>(static_cast<float>(i * 3 - 7)));
  auto a = FromVector<T>(rt, Shape{3, 4}, values);
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->dtype(), DTypeOf<T>());
  auto back = a->template AsVector<T>();
  ASSERT_THAT(back, IsOk());
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(static_cast<double>(static_cast<AccType<T>>((*back)[i])),
              static_cast<double>(static_cast<AccType<T>>(values[i])))
        << DTypeName(DTypeOf<T>()) << " element " << i;
  }
}

TEST_P(NDArrayTest, HostRoundTripEveryDType) {
  RoundTrip<float>(rt());
  RoundTrip<double>(rt());
  RoundTrip<Half>(rt());
  RoundTrip<BFloat16>(rt());
  RoundTrip<uint8_t>(rt());
  RoundTrip<int8_t>(rt());
  RoundTrip<int32_t>(rt());
  RoundTrip<int64_t>(rt());
}

TEST_P(NDArrayTest, SyncCopyToCPU) {
  auto a = FromVector<double>(rt(), Shape{3}, std::vector<double>{1.5, -2, 3});
  ASSERT_THAT(a, IsOk());
  double out[3] = {};
  ASSERT_THAT(a->SyncCopyToCPU(out, 3), IsOk());
  EXPECT_THAT(out, ElementsAre(1.5, -2, 3));
}

TEST_P(NDArrayTest, CallErrorsAreInvalidArgumentNamingBoth) {
  auto a = NDArray::Empty(rt(), Shape{2, 3});
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(a->AsVector<int32_t>(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("int32"), HasSubstr("float32"))));
  std::vector<float> five(5);
  EXPECT_THAT(a->SyncCopyFromCPU(five.data(), 5),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("5"), HasSubstr("(2,3)"))));
  EXPECT_THAT(a->SyncCopyToCPU(five.data(), 5), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(NDArray::Empty(rt(), Shape{}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(NDArray::Empty(rt(), Shape{2, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(2,0)")));
  EXPECT_THAT(NDArray::Empty(rt(), Shape{2}, Context::CPU(), DType::kUnknown),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(NDArray().WaitToRead(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(NDArray().Reshape({1}), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_P(NDArrayTest, HugeShapeIsResourceExhaustedNotACrash) {
  EXPECT_THAT(NDArray::Empty(rt(), Shape{int64_t{1} << 40, int64_t{1} << 40}),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_P(NDArrayTest, GpuContextIsAClearErrorWithoutAGpu) {
#if !TESSERA_USE_CUDA
  auto a = NDArray::Empty(rt(), Shape{4}, Context::GPU(0));
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gpu(0)")));
#else
  GTEST_SKIP() << "built with CUDA";
#endif
}

TEST_P(NDArrayTest, PinnedContextWorksOnTheHost) {
  auto a = FromVector<float>(rt(), Shape{2}, std::vector<float>{1, 2}, Context::CPUPinned());
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->ctx(), Context::CPUPinned());
  EXPECT_THAT(a->AsVector<float>(), IsOkAndHolds(ElementsAre(1, 2)));
}

TEST_P(NDArrayTest, ReshapeSharesStorage) {
  std::vector<float> v(12);
  std::iota(v.begin(), v.end(), 0.0f);
  auto a = FromVector<float>(rt(), Shape{3, 4}, v);
  ASSERT_THAT(a, IsOk());
  auto r = a->Reshape({2, -1});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->shape(), (Shape{2, 6}));
  EXPECT_EQ(r->var(), a->var());
  std::vector<float> w(12, 5.0f);
  ASSERT_THAT(r->SyncCopyFromCPU(w.data(), 12), IsOk());
  EXPECT_THAT(a->AsVector<float>(), IsOkAndHolds(ElementsAreArray(w)));

  EXPECT_THAT(a->Reshape({-1, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than one -1")));
  EXPECT_THAT(a->Reshape({5, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("(3,4)"), HasSubstr("(5,-1)"))));
  EXPECT_THAT(a->Reshape({2, 2}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->Reshape({0, 12}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->Reshape({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(NDArrayTest, SliceAndAtWriteThroughToTheBase) {
  std::vector<int32_t> v(12);
  std::iota(v.begin(), v.end(), 0);
  auto a = FromVector<int32_t>(rt(), Shape{4, 3}, v);
  ASSERT_THAT(a, IsOk());

  auto s = a->Slice(1, 3);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->shape(), (Shape{2, 3}));
  EXPECT_THAT(s->AsVector<int32_t>(), IsOkAndHolds(ElementsAre(3, 4, 5, 6, 7, 8)));
  std::vector<int32_t> neg{-1, -2, -3, -4, -5, -6};
  ASSERT_THAT(s->SyncCopyFromCPU(neg.data(), 6), IsOk());

  auto row = a->At(3);
  ASSERT_THAT(row, IsOk());
  EXPECT_EQ(row->shape(), (Shape{3}));
  std::vector<int32_t> hundreds{100, 200, 300};
  ASSERT_THAT(row->SyncCopyFromCPU(hundreds.data(), 3), IsOk());

  // A view of a view: element 1 of row 0 of the slice = a[1][1].
  auto elem = s->At(0)->At(1);
  ASSERT_THAT(elem, IsOk());
  EXPECT_EQ(elem->shape(), (Shape{1}));
  EXPECT_THAT(elem->AsVector<int32_t>(), IsOkAndHolds(ElementsAre(-2)));

  EXPECT_THAT(a->AsVector<int32_t>(),
              IsOkAndHolds(ElementsAre(0, 1, 2, -1, -2, -3, -4, -5, -6, 100, 200, 300)));

  EXPECT_THAT(a->Slice(2, 5), StatusIs(absl::StatusCode::kInvalidArgument,
                                       ::testing::AllOf(HasSubstr("[2, 5)"), HasSubstr("(4,3)"))));
  EXPECT_THAT(a->Slice(-1, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->Slice(2, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->At(4), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4")));
  EXPECT_THAT(a->At(-1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(NDArrayTest, ViewsKeepTheChunkAliveAndTheLastOneFreesIt) {
  engine::Storage* storage = rt().storage;
  std::optional<NDArray> view;
  {
    auto a = NDArray::Empty(rt(), Shape{1024}, Context::CPU(), DType::kFloat64);
    ASSERT_THAT(a, IsOk());
    view = *a->Slice(512, 1024);
  }
  std::vector<double> v(512, 2.5);
  ASSERT_THAT(view->SyncCopyFromCPU(v.data(), 512), IsOk());
  EXPECT_THAT(view->AsVector<double>(), IsOkAndHolds(ElementsAreArray(v)));
  EXPECT_EQ(storage->Stats(Context::CPU()).bytes_in_use, 8192u);
  view.reset();
  ASSERT_THAT(rt().engine->WaitForAll(), IsOk());
  EXPECT_EQ(storage->Stats(Context::CPU()).bytes_in_use, 0u);
}

TEST_P(NDArrayTest, FailureOfAPushedWriterComesBackFromWaitToRead) {
  auto a = NDArray::Empty(rt(), Shape{2});
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(rt().engine->PushSync(
                  [](engine::RunContext) { return absl::InternalError("kernel exploded"); },
                  Context::CPU(), {}, {a->var()}, engine::FnProperty::kNormal, 0, "Exploder"),
              IsOk());
  EXPECT_THAT(a->WaitToRead(), StatusIs(absl::StatusCode::kInternal, HasSubstr("exploded")));
  // Reported once; the array is usable again.
  std::vector<float> v{1, 2};
  EXPECT_THAT(a->SyncCopyFromCPU(v.data(), 2), IsOk());
  EXPECT_THAT(a->AsVector<float>(), IsOkAndHolds(ElementsAre(1, 2)));
}

TEST_P(NDArrayTest, ConcurrentViewsFromManyThreads) {
  auto a = NDArray::Empty(rt(), Shape{8, 16}, Context::CPU(), DType::kInt64);
  ASSERT_THAT(a, IsOk());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      NDArray row = *a->At(t);
      std::vector<int64_t> v(16, t * 10);
      EXPECT_THAT(row.SyncCopyFromCPU(v.data(), 16), IsOk());
    });
  }
  for (auto& th : threads) th.join();
  auto all = a->AsVector<int64_t>();
  ASSERT_THAT(all, IsOk());
  for (int i = 0; i < 128; ++i) EXPECT_EQ((*all)[i], (i / 16) * 10);
}

}  // namespace
}  // namespace tessera

// ops::Invoke / InvokeInto: registered operators applied to NDArrays through the engine.
#include "ops/imperative.h"

#include <cmath>
#include <vector>

#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"

namespace tessera::ops {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ImperativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = OwnedRuntime::Create();
    ASSERT_TRUE(rt.ok()) << rt.status();
    owned_ = std::move(rt).value();
  }
  const Runtime& rt() { return owned_->get(); }
  NDArray Array(const Shape& shape, std::vector<float> values) {
    auto a = FromVector<float>(rt(), shape, values);
    EXPECT_TRUE(a.ok()) << a.status();
    return *a;
  }

  std::unique_ptr<OwnedRuntime> owned_;
};

TEST_F(ImperativeTest, SmoothL1OnNDArrays) {
  NDArray x = Array({4}, {-2.0f, -0.5f, 0.25f, 3.0f});
  auto out = Invoke("smooth_l1", {{"scalar", "1"}}, {x});
  ASSERT_THAT(out.status(), IsOk());
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].shape(), (Shape{4}));
  auto values = (*out)[0].AsVector<float>();
  ASSERT_THAT(values.status(), IsOk());
  EXPECT_EQ(*values, (std::vector<float>{1.5f, 0.125f, 0.03125f, 2.5f}));
}

TEST_F(ImperativeTest, ChainsWithoutWaiting) {
  NDArray a = Array({2, 3}, {1, 2, 3, 4, 5, 6});
  NDArray b = Array({2, 3}, {6, 5, 4, 3, 2, 1});
  NDArray acc = a;
  // ((a + b) * 2 - b) ... pushed back to back; the engine orders them by their arrays.
  for (int i = 0; i < 20; ++i) {
    auto sum = Invoke("elemwise_add", {}, {acc, b});
    ASSERT_THAT(sum.status(), IsOk());
    auto scaled = Invoke("_mul_scalar", {{"scalar", "0.5"}}, {(*sum)[0]});
    ASSERT_THAT(scaled.status(), IsOk());
    acc = (*scaled)[0];
  }
  auto values = acc.AsVector<float>();
  ASSERT_THAT(values.status(), IsOk());
  // x <- (x + b) / 2 converges to b; after 20 steps the gap shrank by 2^20.
  const std::vector<float> av{1, 2, 3, 4, 5, 6}, bv{6, 5, 4, 3, 2, 1};
  for (int i = 0; i < 6; ++i) {
    const double expected = bv[i] + (av[i] - bv[i]) / std::pow(2.0, 20);
    EXPECT_NEAR((*values)[i], expected, 1e-5);
  }
}

TEST_F(ImperativeTest, InvokeIntoAddsTo) {
  NDArray x = Array({3}, {1, 2, 3});
  NDArray out = Array({3}, {10, 20, 30});
  ASSERT_THAT(InvokeInto("square", {}, {x}, {out}, OpReqType::kAddTo), IsOk());
  auto values = out.AsVector<float>();
  ASSERT_THAT(values.status(), IsOk());
  EXPECT_EQ(*values, (std::vector<float>{11, 24, 39}));

  NDArray wrong = Array({4}, {0, 0, 0, 0});
  EXPECT_THAT(InvokeInto("square", {}, {x}, {wrong}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("square"), HasSubstr("(3,)"), HasSubstr("(4,)"))));
  EXPECT_THAT(InvokeInto("square", {}, {x}, {x}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shares storage")));
}

TEST_F(ImperativeTest, MisuseIsReportedBeforeAnythingRuns) {
  NDArray a = Array({2, 3}, {1, 2, 3, 4, 5, 6});
  NDArray b = Array({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Invoke("no_such_op", {}, {a}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_op")));
  EXPECT_THAT(Invoke("elemwise_add", {}, {a}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("expected 2 inputs"), HasSubstr("lhs, rhs"))));
  EXPECT_THAT(Invoke("elemwise_add", {}, {a, b}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("(2,3)"), HasSubstr("(3,2)"))));
  EXPECT_THAT(Invoke("elemwise_add", {}, {a, NDArray()}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'rhs' is a none array")));
  auto d = NDArray::Empty(rt(), {2, 3}, Context::CPU(), DType::kFloat64);
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_THAT(Invoke("elemwise_add", {}, {a, *d}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("float32"), HasSubstr("float64"))));
  EXPECT_THAT(Invoke("_plus_scalar", {{"scalar", "x"}}, {a}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'x'")));
}

TEST_F(ImperativeTest, KernelFailureSurfacesAtTheWait) {
  auto ints = FromVector<int32_t>(rt(), {3}, {1, 2, 3});
  ASSERT_THAT(ints.status(), IsOk());
  auto out = Invoke("exp", {}, {*ints});  // types infer; the float-only kernel refuses
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_THAT((*out)[0].WaitToRead(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32")));
}

}  // namespace
}  // namespace tessera::ops

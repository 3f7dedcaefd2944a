// Random fills: reproducible by seed on both engines, plausible moments, range, errors.
#include "ndarray/random.h"

#include <cmath>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

class RandomTest : public testing::EngineTest {};
TESSERA_INSTANTIATE_ENGINES(RandomTest);

// Two fills (uniform, then normal) with a fresh runtime seeded `seed`.
std::pair<std::vector<float>, std::vector<double>> Draw(testing::EngineKind kind, uint64_t seed) {
  auto owned = testing::MakeRuntime(kind, seed);
  auto u = NDArray::Empty(owned->get(), Shape{100}, Context::CPU(), DType::kFloat32);
  auto n = NDArray::Empty(owned->get(), Shape{10, 10}, Context::CPU(), DType::kFloat64);
  TESSERA_CHECK(SampleUniform(-1, 1, *u).ok());
  TESSERA_CHECK(SampleNormal(0, 1, *n).ok());
  return {*u->AsVector<float>(), *n->AsVector<double>()};
}

TEST_P(RandomTest, SameSeedSameNumbersAcrossEngines) {
  auto a = Draw(GetParam(), 42);
  auto b = Draw(GetParam(), 42);
  auto other_engine =
      Draw(GetParam() == testing::EngineKind::kNaive ? testing::EngineKind::kThreaded
                                                     : testing::EngineKind::kNaive,
           42);
  auto c = Draw(GetParam(), 43);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, other_engine);
  EXPECT_NE(a.first, c.first);
  EXPECT_NE(a.second, c.second);
}

TEST_P(RandomTest, UniformRangeAndMoments) {
  constexpr int kN = 200000;
  auto a = NDArray::Empty(rt(), Shape{kN}, Context::CPU(), DType::kFloat64);
  ASSERT_THAT(SampleUniform(2.0, 5.0, *a), IsOk());
  std::vector<double> v = *a->AsVector<double>();
  double sum = 0, sq = 0;
  for (double x : v) {
    ASSERT_GE(x, 2.0);
    ASSERT_LT(x, 5.0);
    sum += x;
    sq += x * x;
  }
  const double mean = sum / kN, var = sq / kN - mean * mean;
  // Uniform(2,5): mean 3.5, variance 9/12 = 0.75. Standard error of the mean ~0.002.
  EXPECT_NEAR(mean, 3.5, 0.01);
  EXPECT_NEAR(var, 0.75, 0.01);
}

TEST_P(RandomTest, NormalMomentsForEachFloatType) {
  constexpr int kN = 100000;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    auto a = NDArray::Empty(rt(), Shape{kN}, Context::CPU(), dt);
    ASSERT_THAT(SampleNormal(-3.0, 2.0, *a), IsOk());
    std::vector<double> v;
    TESSERA_FLOAT_TYPE_SWITCH(dt, DT,
                              {
                                const std::vector<DT> values = *a->AsVector<DT>();
                                for (DT x : values)
                                  v.push_back(static_cast<double>(static_cast<AccType<DT>>(x)));
                              },
                              {});
    double sum = 0, sq = 0;
    for (double x : v) {
      sum += x;
      sq += x * x;
    }
    const double mean = sum / kN, sd = std::sqrt(sq / kN - mean * mean);
    EXPECT_NEAR(mean, -3.0, 0.03) << DTypeName(dt);
    EXPECT_NEAR(sd, 2.0, 0.03) << DTypeName(dt);
  }
}

TEST_P(RandomTest, FillsOfViewsTouchOnlyTheView) {
  std::vector<float> zeros(20, 0.0f);
  auto a = FromVector<float>(rt(), Shape{4, 5}, zeros);
  ASSERT_THAT(SampleUniform(1, 2, *a->Slice(1, 3)), IsOk());
  std::vector<float> v = *a->AsVector<float>();
  for (int i = 0; i < 20; ++i) {
    if (i >= 5 && i < 15) {
      EXPECT_GE(v[i], 1.0f);
    } else {
      EXPECT_EQ(v[i], 0.0f);
    }
  }
}

TEST_P(RandomTest, Errors) {
  auto i = NDArray::Empty(rt(), Shape{3}, Context::CPU(), DType::kInt32);
  EXPECT_THAT(SampleUniform(0, 1, *i),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32")));
  auto f = NDArray::Empty(rt(), Shape{3});
  EXPECT_THAT(SampleUniform(1, 1, *f), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SampleUniform(0, INFINITY, *f), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SampleNormal(0, -1, *f), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SampleNormal(0, 1, NDArray()), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tessera

// NDArray arithmetic against plain-loop references: broadcasting, scalars on both sides,
// in-place updates through views (with a randomized oracle), reductions, Dot, casts,
// copies and every call-time error.
#include "ndarray/arithmetic.h"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/ndarray.h"
#include "tests/ndarray/test_util.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::IsOkAndHolds;
using ::testing::Pointwise;
using testing::StatusIs;

class ArithmeticTest : public testing::EngineTest {
 protected:
  NDArray Make(const Shape& shape, std::vector<double> v) {
    return *FromVector<double>(rt(), shape, v);
  }
  NDArray Iota(const Shape& shape, double start = 1) {
    std::vector<double> v(shape.Size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
    return Make(shape, v);
  }
};
TESSERA_INSTANTIATE_ENGINES(ArithmeticTest);

// out[i] = f(a[ia], b[ib]) with NumPy broadcasting, by explicit index arithmetic.
std::vector<double> BroadcastRef(const std::vector<double>& a, const Shape& as,
                                 const std::vector<double>& b, const Shape& bs, const Shape& os,
                                 const std::function<double(double, double)>& f) {
  std::vector<double> out(os.Size());
  const int nd = os.ndim();
  for (int64_t i = 0; i < os.Size(); ++i) {
    std::vector<int64_t> idx(nd);
    int64_t rest = i;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rest % os[d];
      rest /= os[d];
    }
    auto flat = [&](const Shape& s) {
      int64_t off = 0;
      for (int d = 0; d < s.ndim(); ++d) {
        const int64_t k = idx[nd - s.ndim() + d];
        off = off * s[d] + (s[d] == 1 ? 0 : k);
      }
      return off;
    };
    out[i] = f(a[flat(as)], b[flat(bs)]);
  }
  return out;
}

TEST_P(ArithmeticTest, BroadcastingBinaryOpsMatchLoops) {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {{{2, 3}, {2, 3}, {2, 3}},
                                   {{2, 3}, {3}, {2, 3}},
                                   {{2, 1, 4}, {3, 1}, {2, 3, 4}},
                                   {{1}, {4, 2}, {4, 2}},
                                   {{5, 1}, {1, 6}, {5, 6}}};
  for (const Case& c : cases) {
    NDArray a = Iota(c.a, 1), b = Iota(c.b, 0.5);
    std::vector<double> av = *a.AsVector<double>(), bv = *b.AsVector<double>();
    auto check = [&](absl::StatusOr<NDArray> r, std::function<double(double, double)> f) {
      ASSERT_THAT(r, IsOk());
      EXPECT_EQ(r->shape(), c.out);
      EXPECT_THAT(
          r->AsVector<double>(),
          IsOkAndHolds(Pointwise(DoubleNear(1e-12), BroadcastRef(av, c.a, bv, c.b, c.out, f))))
          << c.a.ToString() << " with " << c.b.ToString();
    };
    check(a + b, std::plus<double>());
    check(a - b, std::minus<double>());
    check(a * b, std::multiplies<double>());
    check(a / b, std::divides<double>());
    check(Add(a, b), std::plus<double>());
    check(Divide(b, a), [](double x, double y) { return y / x; });  // b / a, swapped refs
  }
}

TEST_P(ArithmeticTest, ScalarsOnBothSides) {
  NDArray a = Make({4}, {1, 2, 4, 8});
  EXPECT_THAT((a + 1.0)->AsVector<double>(), IsOkAndHolds(ElementsAre(2, 3, 5, 9)));
  EXPECT_THAT((1.0 + a)->AsVector<double>(), IsOkAndHolds(ElementsAre(2, 3, 5, 9)));
  EXPECT_THAT((a - 1.0)->AsVector<double>(), IsOkAndHolds(ElementsAre(0, 1, 3, 7)));
  EXPECT_THAT((10.0 - a)->AsVector<double>(), IsOkAndHolds(ElementsAre(9, 8, 6, 2)));
  EXPECT_THAT((a * 3.0)->AsVector<double>(), IsOkAndHolds(ElementsAre(3, 6, 12, 24)));
  EXPECT_THAT((2.0 * a)->AsVector<double>(), IsOkAndHolds(ElementsAre(2, 4, 8, 16)));
  EXPECT_THAT((a / 2.0)->AsVector<double>(), IsOkAndHolds(ElementsAre(0.5, 1, 2, 4)));
  EXPECT_THAT((8.0 / a)->AsVector<double>(), IsOkAndHolds(ElementsAre(8, 4, 2, 1)));
  EXPECT_THAT(Subtract(5.0, a)->AsVector<double>(), IsOkAndHolds(ElementsAre(4, 3, 1, -3)));
  EXPECT_THAT(Multiply(a, -1.0)->AsVector<double>(), IsOkAndHolds(ElementsAre(-1, -2, -4, -8)));
}

TEST_P(ArithmeticTest, IntegerAndHalfDTypes) {
  auto i = FromVector<int32_t>(rt(), Shape{3}, std::vector<int32_t>{7, -8, 9});
  auto j = FromVector<int32_t>(rt(), Shape{3}, std::vector<int32_t>{2, 3, 4});
  EXPECT_THAT((*i + *j)->AsVector<int32_t>(), IsOkAndHolds(ElementsAre(9, -5, 13)));
  EXPECT_THAT((*i * 2.0)->AsVector<int32_t>(), IsOkAndHolds(ElementsAre(14, -16, 18)));
  auto h = FromVector<Half>(rt(), Shape{2}, std::vector<Half>{Half(1.5f), Half(-2.0f)});
  auto hs = *h + 1.0;
  ASSERT_THAT(hs, IsOk());
  auto hv = *hs->AsVector<Half>();
  EXPECT_EQ(static_cast<float>(hv[0]), 2.5f);
  EXPECT_EQ(static_cast<float>(hv[1]), -1.0f);
}

TEST_P(ArithmeticTest, MismatchesAreInvalidArgumentNamingBoth) {
  NDArray a = Iota({2, 3}), b = Iota({4});
  EXPECT_THAT(a + b, StatusIs(absl::StatusCode::kInvalidArgument,
                              AllOf(HasSubstr("(2,3)"), HasSubstr("(4,)"))));
  auto f = FromVector<float>(rt(), Shape{2, 3}, std::vector<float>(6, 1.0f));
  EXPECT_THAT(a * *f, StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("float64"), HasSubstr("float32"))));
  EXPECT_THAT(a -= *f, StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("float64"), HasSubstr("float32"))));
  // In place cannot grow lhs.
  NDArray row = Iota({3}), mat = Iota({2, 3});
  EXPECT_THAT(row += mat, StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr("(3,)"), HasSubstr("(2,3)"))));
  EXPECT_THAT(Add(NDArray(), a), StatusIs(absl::StatusCode::kInvalidArgument));
  // The failed calls pushed nothing: `a` is unchanged.
  EXPECT_THAT(a.AsVector<double>(), IsOkAndHolds(ElementsAre(1, 2, 3, 4, 5, 6)));
}

TEST_P(ArithmeticTest, InPlaceOpsWriteThroughViews) {
  NDArray m = Iota({3, 4}, 0);
  NDArray row1 = *m.At(1);
  ASSERT_THAT(row1 += 100.0, IsOk());
  ASSERT_THAT(*m.Slice(2, 3) *= Make({4}, {1, 2, 3, 4}), IsOk());  // broadcast (4) to (1,4)
  ASSERT_THAT(*m.At(0) -= Make({1}, {1}), IsOk());
  ASSERT_THAT(m /= Make({3, 1}, {1, 2, 4}), IsOk());
  EXPECT_THAT(m.AsVector<double>(),
              IsOkAndHolds(ElementsAre(-1, 0, 1, 2, 104 / 2.0, 105 / 2.0, 106 / 2.0, 107 / 2.0,
                                       8 / 4.0, 18 / 4.0, 30 / 4.0, 44 / 4.0)));
}

TEST_P(ArithmeticTest, InPlaceWithOverlappingRhsReadsRhsFirst) {
  NDArray v = Iota({6}, 1);  // 1..6
  // v[1:6] += v[0:5]: NumPy semantics read the old v[0:5] = 1..5.
  ASSERT_THAT(*v.Slice(1, 6) += *v.Slice(0, 5), IsOk());
  EXPECT_THAT(v.AsVector<double>(), IsOkAndHolds(ElementsAre(1, 3, 5, 7, 9, 11)));
  // A matrix minus its own first row, broadcast: row 0 becomes 0, others minus old row 0.
  NDArray m = Iota({3, 2}, 1);
  ASSERT_THAT(m -= *m.At(0), IsOk());
  EXPECT_THAT(m.AsVector<double>(), IsOkAndHolds(ElementsAre(0, 0, 2, 2, 4, 4)));
  ASSERT_THAT(m += m, IsOk());
  EXPECT_THAT(m.AsVector<double>(), IsOkAndHolds(ElementsAre(0, 0, 4, 4, 8, 8)));
}

TEST_P(ArithmeticTest, Reductions) {
  NDArray a = Iota({2, 3, 4}, 0);
  std::vector<double> av = *a.AsVector<double>();
  auto at = [&](int i, int j, int k) { return av[(i * 3 + j) * 4 + k]; };

  auto sum1 = Sum(a, std::vector<int>{1});
  ASSERT_THAT(sum1, IsOk());
  EXPECT_EQ(sum1->shape(), (Shape{2, 4}));
  std::vector<double> ref;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) ref.push_back(at(i, 0, k) + at(i, 1, k) + at(i, 2, k));
  EXPECT_THAT(sum1->AsVector<double>(), IsOkAndHolds(Pointwise(DoubleNear(1e-9), ref)));

  auto mean_keep = Mean(a, std::vector<int>{-1, 0}, /*keepdims=*/true);
  ASSERT_THAT(mean_keep, IsOk());
  EXPECT_EQ(mean_keep->shape(), (Shape{1, 3, 1}));
  ref.clear();
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += at(i, j, k);
    ref.push_back(s / 8);
  }
  EXPECT_THAT(mean_keep->AsVector<double>(), IsOkAndHolds(Pointwise(DoubleNear(1e-9), ref)));

  auto mx = Max(a);
  ASSERT_THAT(mx, IsOk());
  EXPECT_EQ(mx->shape(), (Shape{1}));
  EXPECT_THAT(mx->AsVector<double>(), IsOkAndHolds(ElementsAre(23)));
  EXPECT_THAT(Sum(a)->AsVector<double>(), IsOkAndHolds(ElementsAre(276)));
  EXPECT_EQ(Sum(a, {}, true)->shape(), (Shape{1, 1, 1}));

  EXPECT_THAT(Sum(a, std::vector<int>{3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(2,3,4)")));
  EXPECT_THAT(Sum(a, std::vector<int>{1, -2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("repeated")));
}

TEST_P(ArithmeticTest, DotWithTransposes) {
  NDArray a = Iota({2, 3}, 1), b = Iota({3, 4}, -2);
  std::vector<double> av = *a.AsVector<double>(), bv = *b.AsVector<double>();
  std::vector<double> ref(8, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) ref[i * 4 + j] += av[i * 3 + k] * bv[k * 4 + j];
  auto c = Dot(a, b);
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->shape(), (Shape{2, 4}));
  EXPECT_THAT(c->AsVector<double>(), IsOkAndHolds(Pointwise(DoubleNear(1e-9), ref)));

  // a^T stored as (3,2), b^T as (4,3): same product.
  std::vector<double> at(6), bt(12);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 3; ++k) at[k * 2 + i] = av[i * 3 + k];
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 4; ++j) bt[j * 3 + k] = bv[k * 4 + j];
  auto c2 = Dot(Make({3, 2}, at), Make({4, 3}, bt), true, true);
  ASSERT_THAT(c2, IsOk());
  EXPECT_THAT(c2->AsVector<double>(), IsOkAndHolds(Pointwise(DoubleNear(1e-9), ref)));

  // float32 through oneDNN.
  auto af = Cast(a, DType::kFloat32), bf = Cast(b, DType::kFloat32);
  auto cf = Dot(*af, *bf);
  ASSERT_THAT(cf, IsOk());
  auto cfv = cf->AsVector<float>();
  ASSERT_THAT(cfv, IsOk());
  for (int i = 0; i < 8; ++i) EXPECT_NEAR((*cfv)[i], ref[i], 1e-4);

  EXPECT_THAT(Dot(a, a), StatusIs(absl::StatusCode::kInvalidArgument,
                                  AllOf(HasSubstr("(2,3)"), HasSubstr("inner"))));
  EXPECT_THAT(Dot(a, Iota({3})), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2-D")));
  auto ai = Cast(a, DType::kInt32);
  EXPECT_THAT(Dot(*ai, *ai, false, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32")));
}

TEST_P(ArithmeticTest, CastAndFills) {
  NDArray a = Make({4}, {1.25, -2.75, 300, 0.5});
  EXPECT_THAT(AsType(a, DType::kInt32)->AsVector<int32_t>(),
              IsOkAndHolds(ElementsAre(1, -2, 300, 0)));
  auto h = Cast(a, DType::kBFloat16);
  ASSERT_THAT(h, IsOk());
  auto back = Cast(*h, DType::kFloat32);
  EXPECT_THAT(back->AsVector<float>(), IsOkAndHolds(ElementsAre(1.25f, -2.75f, 300.0f, 0.5f)));
  EXPECT_THAT(Cast(a, DType::kUnknown), StatusIs(absl::StatusCode::kInvalidArgument));

  EXPECT_THAT(Zeros(rt(), Shape{2, 2})->AsVector<float>(), IsOkAndHolds(ElementsAre(0, 0, 0, 0)));
  EXPECT_THAT(Ones(rt(), Shape{3}, Context::CPU(), DType::kInt8)->AsVector<int8_t>(),
              IsOkAndHolds(ElementsAre(1, 1, 1)));
  EXPECT_THAT(Full(rt(), Shape{2}, 2.5, Context::CPU(), DType::kFloat64)->AsVector<double>(),
              IsOkAndHolds(ElementsAre(2.5, 2.5)));
  ASSERT_THAT(Fill(*a.Slice(1, 3), 9), IsOk());
  EXPECT_THAT(a.AsVector<double>(), IsOkAndHolds(ElementsAre(1.25, 9, 9, 0.5)));
}

TEST_P(ArithmeticTest, CopiesBetweenContexts) {
  NDArray a = Iota({2, 3});
  auto pinned = CopyTo(a, Context::CPUPinned());
  ASSERT_THAT(pinned, IsOk());
  EXPECT_EQ(pinned->ctx(), Context::CPUPinned());
  ASSERT_THAT(*pinned *= 2.0, IsOk());  // the copy is independent
  EXPECT_THAT(pinned->AsVector<double>(), IsOkAndHolds(ElementsAre(2, 4, 6, 8, 10, 12)));
  EXPECT_THAT(a.AsVector<double>(), IsOkAndHolds(ElementsAre(1, 2, 3, 4, 5, 6)));
  ASSERT_THAT(CopyFromTo(*pinned, a), IsOk());
  EXPECT_THAT(a.AsVector<double>(), IsOkAndHolds(ElementsAre(2, 4, 6, 8, 10, 12)));
  // Overlapping views of one chunk.
  NDArray v = Iota({5});
  ASSERT_THAT(CopyFromTo(*v.Slice(0, 4), *v.Slice(1, 5)), IsOk());
  EXPECT_THAT(v.AsVector<double>(), IsOkAndHolds(ElementsAre(1, 1, 2, 3, 4)));

  EXPECT_THAT(CopyFromTo(a, Iota({3, 2})), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    AllOf(HasSubstr("(2,3)"), HasSubstr("(3,2)"))));
  EXPECT_THAT(CopyFromTo(a, *Cast(a, DType::kFloat32)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float32")));
#if !TESSERA_USE_CUDA
  EXPECT_THAT(CopyTo(a, Context::GPU(0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gpu(0)")));
  EXPECT_THAT(Zeros(rt(), Shape{2}, Context::GPU(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
#endif
}

// Random views and in-place updates against a sequential oracle on a std::vector.
TEST_P(ArithmeticTest, RandomViewsAndInPlaceOpsMatchASequentialOracle) {
  std::mt19937 gen(1234);
  constexpr int kRows = 6, kCols = 4;
  std::vector<double> oracle(kRows * kCols);
  for (size_t i = 0; i < oracle.size(); ++i) oracle[i] = static_cast<double>(i % 7) + 1;
  NDArray base = Make({kRows, kCols}, oracle);
  for (int step = 0; step < 300; ++step) {
    const int begin = std::uniform_int_distribution<int>(0, kRows - 1)(gen);
    const int end = std::uniform_int_distribution<int>(begin + 1, kRows)(gen);
    NDArray view = *base.Slice(begin, end);
    const int op = std::uniform_int_distribution<int>(0, 3)(gen);
    const int kind = std::uniform_int_distribution<int>(0, 2)(gen);
    // Values stay small integers (divisions by 1 or 2 of even values avoided by using
    // only +,-,* with small scalars and division by 1), so the comparison is exact.
    auto apply = [&](double& x, double y) {
      switch (op) {
        case 0:
          x += y;
          break;
        case 1:
          x -= y;
          break;
        case 2:
          x *= y;
          break;
        default:
          x /= y;
          break;
      }
    };
    if (kind == 0) {  // scalar
      const double s = op == 3 ? 1.0 : std::uniform_int_distribution<int>(-2, 2)(gen);
      absl::Status st = op == 0   ? (view += s)
                        : op == 1 ? (view -= s)
                        : op == 2 ? (view *= s)
                                  : (view /= s);
      ASSERT_THAT(st, IsOk());
      for (int i = begin * kCols; i < end * kCols; ++i) apply(oracle[i], s);
    } else {  // another row of the same base, broadcast over the view (may overlap it)
      const int r = std::uniform_int_distribution<int>(0, kRows - 1)(gen);
      NDArray rhs = kind == 1 ? *base.At(r) : *base.Slice(r, r + 1);
      std::vector<double> row(oracle.begin() + r * kCols, oracle.begin() + (r + 1) * kCols);
      if (op == 3) {
        ASSERT_THAT(view /= *Ones(rt(), Shape{kCols}, Context::CPU(), DType::kFloat64), IsOk());
      } else {
        absl::Status st = op == 0 ? (view += rhs) : op == 1 ? (view -= rhs) : (view *= rhs);
        ASSERT_THAT(st, IsOk());
        for (int i = begin; i < end; ++i)
          for (int j = 0; j < kCols; ++j) apply(oracle[i * kCols + j], row[j]);
      }
    }
    // Keep magnitudes bounded so products stay exact.
    if (step % 10 == 9) {
      ASSERT_THAT(base.SyncCopyFromCPU(oracle.data(), 0),
                  StatusIs(absl::StatusCode::kInvalidArgument));
      std::vector<double> now = *base.AsVector<double>();
      ASSERT_EQ(now, oracle) << "step " << step;
      for (double& x : oracle) x = std::fmod(x, 97.0);
      ASSERT_THAT(base.SyncCopyFromCPU(oracle.data(), kRows * kCols), IsOk());
    }
  }
  EXPECT_THAT(base.AsVector<double>(), IsOkAndHolds(ElementsAreArray(oracle)));
}

}  // namespace
}  // namespace tessera

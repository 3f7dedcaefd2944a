// Tests of the CPU tensor math kernels (ndarray/math.h) against plain double (and, for
// integers, int64) loops written here: every op, every dtype, every OpReqType, broadcasting
// patterns, aliasing, and the errors.
#include "ndarray/math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::math {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const DType kAllTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                           DType::kUInt8,   DType::kInt8,    DType::kInt32,   DType::kInt64};

bool IsInt(DType t) { return !IsFloatingPoint(t); }

// Relative/absolute tolerance for results rounded once into `t`.
double Tol(DType t) {
  switch (t) {
    case DType::kFloat64:
      return 1e-12;
    case DType::kFloat32:
      return 2e-6;
    case DType::kFloat16:
      return 2e-3;
    case DType::kBFloat16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// Host buffer of any dtype, filled and read as doubles.
struct Buf {
  DType dtype;
  Shape shape;
  std::vector<uint64_t> storage;  // 8-byte aligned

  Buf(DType t, Shape s) : dtype(t), shape(std::move(s)), storage(shape.Size() + 1) {}
  TBlob blob() { return TBlob(storage.data(), shape, dtype); }
  int64_t size() const { return shape.Size(); }

  void Set(int64_t i, double v) {
    TESSERA_TYPE_SWITCH(
        dtype, DT,
        {
          if constexpr (std::is_integral_v<DT>) {
            reinterpret_cast<DT*>(storage.data())[i] = static_cast<DT>(static_cast<int64_t>(v));
          } else {
            reinterpret_cast<DT*>(storage.data())[i] = static_cast<DT>(static_cast<float>(v));
            if (dtype == DType::kFloat64) reinterpret_cast<double*>(storage.data())[i] = v;
          }
        },
        {});
  }
  double Get(int64_t i) const {
    double r = 0;
    TESSERA_TYPE_SWITCH(dtype, DT,
                        {
                          r = static_cast<double>(static_cast<AccType<DT>>(
                              reinterpret_cast<const DT*>(storage.data())[i]));
                        },
                        {});
    return r;
  }
  void SetAll(const std::vector<double>& v) {
    for (int64_t i = 0; i < size(); ++i) Set(i, v[i]);
  }
  std::vector<double> All() const {
    std::vector<double> v(size());
    for (int64_t i = 0; i < size(); ++i) v[i] = Get(i);
    return v;
  }
};

// Random values representable in `t`: small integers for integer types (zeros included, to
// reach the defined division by zero), floats in [lo, hi] otherwise.
Buf RandomBuf(DType t, Shape s, std::mt19937_64& rng, double lo = -2, double hi = 2) {
  Buf b(t, std::move(s));
  for (int64_t i = 0; i < b.size(); ++i) {
    if (IsInt(t)) {
      const int64_t ilo = t == DType::kUInt8 ? 0 : static_cast<int64_t>(std::floor(lo * 2.5));
      std::uniform_int_distribution<int64_t> d(ilo, static_cast<int64_t>(std::ceil(hi * 2.5)));
      b.Set(i, static_cast<double>(d(rng)));
    } else {
      b.Set(i, std::uniform_real_distribution<double>(lo, hi)(rng));
    }
  }
  return b;
}

// Wraps an int64 result into integer type `t` (the kernels' defined integer semantics).
double WrapTo(DType t, int64_t v) {
  switch (t) {
    case DType::kUInt8:
      return static_cast<uint8_t>(v);
    case DType::kInt8:
      return static_cast<int8_t>(v);
    case DType::kInt32:
      return static_cast<int32_t>(v);
    default:
      return static_cast<double>(v);
  }
}

int64_t IntPow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 == 0 ? 1 : -1) : 0;
  int64_t r = 1;
  for (int64_t i = 0; i < e; ++i) r *= b;
  return r;
}

double RefBinary(BinaryOp op, DType t, double a, double b) {
  if (IsInt(t)) {
    const int64_t x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
    int64_t r = 0;
    switch (op) {
      case BinaryOp::kAdd:
        r = x + y;
        break;
      case BinaryOp::kSub:
        r = x - y;
        break;
      case BinaryOp::kMul:
        r = x * y;
        break;
      case BinaryOp::kDiv:
        r = y == 0 ? 0 : x / y;
        break;
      case BinaryOp::kPow:
        r = IntPow(x, y);
        break;
      case BinaryOp::kMax:
        r = std::max(x, y);
        break;
      case BinaryOp::kMin:
        r = std::min(x, y);
        break;
    }
    return WrapTo(t, r);
  }
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return std::pow(a, b);
    case BinaryOp::kMax:
      return std::max(a, b);
    case BinaryOp::kMin:
      return std::min(a, b);
  }
  return 0;
}

// Rounds a double into `t` and back, for the expected value of kAddTo.
double RoundTo(DType t, double v) {
  Buf b(t, Shape{1});
  b.Set(0, v);
  return b.Get(0);
}

void ExpectNear(DType t, const std::vector<double>& got, const std::vector<double>& want,
                const std::string& what, double tol_scale = 1) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = Tol(t) * tol_scale;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i])))
        << what << " at " << i << " dtype " << DTypeName(t);
  }
}

// Row-major unravel of `flat` in `shape`, then the offset in `other` (right-aligned,
// broadcast dims index 0).
int64_t BroadcastOffset(const Shape& out, int64_t flat, const Shape& other) {
  int64_t off = 0, stride = 1;
  for (int d = out.ndim() - 1; d >= 0; --d) {
    const int64_t i = flat % out[d];
    flat /= out[d];
    const int od = other.ndim() - out.ndim() + d;
    if (od >= 0) {
      if (other[od] != 1) off += i * stride;
      stride *= other[od];
    }
  }
  return off;
}

const char* OpName(BinaryOp op) {
  const char* names[] = {"add", "sub", "mul", "div", "pow", "max", "min"};
  return names[static_cast<int>(op)];
}

// Checks one broadcast op/dtype/shape pair for kWriteTo, kAddTo, kNullOp and, where out has
// lhs's shape, in-place on lhs.
void CheckBroadcast(BinaryOp op, DType t, const Shape& ls, const Shape& rs, std::mt19937_64& rng) {
  Buf lhs = op == BinaryOp::kPow ? RandomBuf(t, ls, rng, IsInt(t) ? -1.2 : 0.2, 2)
                                 : RandomBuf(t, ls, rng);
  Buf rhs = op == BinaryOp::kPow ? RandomBuf(t, rs, rng, IsInt(t) ? -1.2 : -2, 1.2)
                                 : RandomBuf(t, rs, rng);
  if (op == BinaryOp::kDiv && !IsInt(t)) {  // keep float divisors away from 0
    for (int64_t i = 0; i < rhs.size(); ++i) {
      if (std::fabs(rhs.Get(i)) < 0.25) rhs.Set(i, 0.5);
    }
  }
  const Shape os = *BroadcastShapes(ls, rs);
  std::vector<double> want(os.Size());
  for (int64_t i = 0; i < os.Size(); ++i) {
    want[i] =
        RefBinary(op, t, lhs.Get(BroadcastOffset(os, i, ls)), rhs.Get(BroadcastOffset(os, i, rs)));
  }
  const std::string what = absl::StrCat(OpName(op), " ", ls.ToString(), " ", rs.ToString());

  Buf out(t, os);
  for (int64_t i = 0; i < out.size(); ++i) out.Set(i, IsInt(t) ? 99 : NAN);
  ASSERT_THAT(BroadcastBinary(op, lhs.blob(), rhs.blob(), OpReqType::kWriteTo, out.blob()), IsOk());
  ExpectNear(t, out.All(), want, what + " write");

  Buf acc = RandomBuf(t, os, rng);
  std::vector<double> want_add(os.Size());
  for (int64_t i = 0; i < os.Size(); ++i) {
    want_add[i] = IsInt(t)
                      ? WrapTo(t, static_cast<int64_t>(acc.Get(i)) + static_cast<int64_t>(want[i]))
                      : acc.Get(i) + RoundTo(t, want[i]);
  }
  ASSERT_THAT(BroadcastBinary(op, lhs.blob(), rhs.blob(), OpReqType::kAddTo, acc.blob()), IsOk());
  ExpectNear(t, acc.All(), want_add, what + " addto", 2);

  Buf untouched = RandomBuf(t, os, rng);
  const std::vector<double> before = untouched.All();
  ASSERT_THAT(BroadcastBinary(op, lhs.blob(), rhs.blob(), OpReqType::kNullOp, untouched.blob()),
              IsOk());
  EXPECT_EQ(untouched.All(), before) << what;

  if (ls == os) {
    ASSERT_THAT(BroadcastBinary(op, lhs.blob(), rhs.blob(), OpReqType::kWriteInplace, lhs.blob()),
                IsOk());
    ExpectNear(t, lhs.All(), want, what + " inplace lhs");
  }
}

const std::vector<std::pair<Shape, Shape>>& BroadcastPatterns() {
  static const auto* patterns = new std::vector<std::pair<Shape, Shape>>{
      {{2, 3}, {2, 3}},
      {{2, 3}, {3}},
      {{2, 3}, {1}},
      {{1}, {4, 5}},
      {{4, 1}, {4, 5}},
      {{2, 1, 4}, {3, 1}},
      {{5, 1}, {1, 6}},
      {{2, 3, 4, 5}, {3, 1, 5}},
      {{1, 1}, {1, 1}},
      {{37}, {37}},
      {{3, 1, 2, 1, 4}, {1, 5, 2, 6, 1}},
      {{2, 3, 1}, {2, 3, 1}},
      {{1, 3}, {2, 1}},
      {{70, 9}, {70, 1}},
  };
  return *patterns;
}

TEST(BroadcastBinaryTest, AllOpsDtypesPatterns) {
  std::mt19937_64 rng(1);
  for (DType t : kAllTypes) {
    for (int op = 0; op <= static_cast<int>(BinaryOp::kMin); ++op) {
      for (const auto& [ls, rs] : BroadcastPatterns()) {
        CheckBroadcast(static_cast<BinaryOp>(op), t, ls, rs, rng);
        CheckBroadcast(static_cast<BinaryOp>(op), t, rs, ls, rng);
      }
    }
  }
}

TEST(BroadcastBinaryTest, RandomShapes) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> nd(1, 5), dim(1, 4), coin(0, 2);
  for (int trial = 0; trial < 200; ++trial) {
    Shape out;
    const int n = nd(rng);
    for (int d = 0; d < n; ++d) out.push_back(dim(rng));
    Shape ls, rs;
    const int lskip = std::uniform_int_distribution<int>(0, n - 1)(rng);
    for (int d = lskip; d < n; ++d) ls.push_back(coin(rng) == 0 ? 1 : out[d]);
    for (int d = 0; d < n; ++d) rs.push_back(coin(rng) == 0 ? 1 : out[d]);
    const DType t = trial % 2 ? DType::kFloat64 : DType::kInt32;
    CheckBroadcast(static_cast<BinaryOp>(trial % 7), t, ls, rs, rng);
  }
}

TEST(BroadcastBinaryTest, OutMayAliasRhs) {
  std::vector<double> l = {1, 2, 3, 4, 5, 6}, r = {10, 20, 30, 40, 50, 60};
  ASSERT_THAT(
      BroadcastBinary(BinaryOp::kSub, TBlob(l.data(), Shape{2, 3}), TBlob(r.data(), Shape{2, 3}),
                      OpReqType::kWriteInplace, TBlob(r.data(), Shape{2, 3})),
      IsOk());
  EXPECT_EQ(r, (std::vector<double>{-9, -18, -27, -36, -45, -54}));
  // kAddTo on an alias: out = out + (out * l).
  ASSERT_THAT(
      BroadcastBinary(BinaryOp::kMul, TBlob(l.data(), Shape{2, 3}), TBlob(l.data(), Shape{2, 3}),
                      OpReqType::kAddTo, TBlob(l.data(), Shape{2, 3})),
      IsOk());
  EXPECT_EQ(l, (std::vector<double>{2, 6, 12, 20, 30, 42}));
}

TEST(BroadcastBinaryTest, IntegerDivisionByZeroAndOverflowAreDefined) {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> l = {7, -7, 0, kMin, kMin, 9}, r = {0, 0, 0, -1, 1, -2};
  std::vector<int32_t> out(6);
  ASSERT_THAT(BroadcastBinary(BinaryOp::kDiv, TBlob(l.data(), Shape{6}), TBlob(r.data(), Shape{6}),
                              OpReqType::kWriteTo, TBlob(out.data(), Shape{6})),
              IsOk());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 0, 0, kMin, kMin, -4}));
  std::vector<int64_t> b = {2, 1, -1, -1, 3, 0}, e = {-1, -5, -3, -4, 0, -2}, p(6);
  ASSERT_THAT(BroadcastBinary(BinaryOp::kPow, TBlob(b.data(), Shape{6}), TBlob(e.data(), Shape{6}),
                              OpReqType::kWriteTo, TBlob(p.data(), Shape{6})),
              IsOk());
  EXPECT_EQ(p, (std::vector<int64_t>{0, 1, -1, 1, 1, 0}));
  std::vector<uint8_t> u = {200, 3}, v = {100, 5}, w(2);
  ASSERT_THAT(BinaryScalar(BinaryOp::kAdd, TBlob(u.data(), Shape{2}), 100, false,
                           OpReqType::kWriteTo, TBlob(w.data(), Shape{2})),
              IsOk());
  EXPECT_EQ(w, (std::vector<uint8_t>{44, 103}));
  ASSERT_THAT(BroadcastBinary(BinaryOp::kMul, TBlob(u.data(), Shape{2}), TBlob(v.data(), Shape{2}),
                              OpReqType::kWriteTo, TBlob(w.data(), Shape{2})),
              IsOk());
  EXPECT_EQ(w, (std::vector<uint8_t>{static_cast<uint8_t>(20000), 15}));
}

TEST(BroadcastBinaryTest, FloatMaxMinPropagateNaN) {
  std::vector<float> l = {NAN, 1, 2}, r = {1, NAN, 3}, out(3);
  ASSERT_THAT(BroadcastBinary(BinaryOp::kMax, TBlob(l.data(), Shape{3}), TBlob(r.data(), Shape{3}),
                              OpReqType::kWriteTo, TBlob(out.data(), Shape{3})),
              IsOk());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 3);
  ASSERT_THAT(BroadcastBinary(BinaryOp::kMin, TBlob(l.data(), Shape{3}), TBlob(r.data(), Shape{3}),
                              OpReqType::kWriteTo, TBlob(out.data(), Shape{3})),
              IsOk());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 2);
}

TEST(BroadcastBinaryTest, Errors) {
  std::vector<float> a(6), b(4), c(6);
  std::vector<double> d(6);
  EXPECT_THAT(
      BroadcastBinary(BinaryOp::kAdd, TBlob(a.data(), Shape{2, 3}), TBlob(b.data(), Shape{4}),
                      OpReqType::kWriteTo, TBlob(c.data(), Shape{2, 3})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("(2,3)"), HasSubstr("(4,)"))));
  EXPECT_THAT(
      BroadcastBinary(BinaryOp::kAdd, TBlob(a.data(), Shape{2, 3}), TBlob(b.data(), Shape{1}),
                      OpReqType::kWriteTo, TBlob(c.data(), Shape{3, 2})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("(2,3)"), HasSubstr("(3,2)"))));
  EXPECT_THAT(
      BroadcastBinary(BinaryOp::kAdd, TBlob(a.data(), Shape{2, 3}), TBlob(d.data(), Shape{2, 3}),
                      OpReqType::kWriteTo, TBlob(c.data(), Shape{2, 3})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("float32"), HasSubstr("float64"))));
  EXPECT_THAT(BroadcastBinary(BinaryOp::kAdd, TBlob(a.data(), Shape{2, 3}, Context::GPU()),
                              TBlob(c.data(), Shape{2, 3}), OpReqType::kWriteTo,
                              TBlob(c.data(), Shape{2, 3})),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("math kernels run on CPU; got gpu(0)")));
  EXPECT_THAT(BroadcastBinary(BinaryOp::kAdd, TBlob(nullptr, Shape{2, 3}, DType::kFloat32),
                              TBlob(c.data(), Shape{2, 3}), OpReqType::kWriteTo,
                              TBlob(c.data(), Shape{2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no data")));
}

TEST(BinaryScalarTest, AllOpsDtypesBothSidesAllReqs) {
  std::mt19937_64 rng(3);
  for (DType t : kAllTypes) {
    for (int o = 0; o <= static_cast<int>(BinaryOp::kMin); ++o) {
      const BinaryOp op = static_cast<BinaryOp>(o);
      for (bool left : {false, true}) {
        const bool pow_base_is_array = op == BinaryOp::kPow && !left;
        Buf in = op == BinaryOp::kPow && !IsInt(t)
                     ? RandomBuf(t, Shape{3, 17}, rng, pow_base_is_array ? 0.2 : -2, 2)
                     : RandomBuf(t, Shape{3, 17}, rng);
        if (op == BinaryOp::kDiv && left && !IsInt(t)) {
          for (int64_t i = 0; i < in.size(); ++i) {
            if (std::fabs(in.Get(i)) < 0.25) in.Set(i, -0.5);
          }
        }
        const double s = IsInt(t) ? 3 : 1.5;
        std::vector<double> want(in.size());
        for (int64_t i = 0; i < in.size(); ++i) {
          want[i] = left ? RefBinary(op, t, s, in.Get(i)) : RefBinary(op, t, in.Get(i), s);
        }
        const std::string what = absl::StrCat("scalar ", OpName(op), left ? " left" : " right");
        Buf out(t, in.shape);
        ASSERT_THAT(BinaryScalar(op, in.blob(), s, left, OpReqType::kWriteTo, out.blob()), IsOk());
        ExpectNear(t, out.All(), want, what);
        Buf acc = RandomBuf(t, in.shape, rng);
        std::vector<double> want_add(in.size());
        for (int64_t i = 0; i < in.size(); ++i) {
          want_add[i] =
              IsInt(t) ? WrapTo(t, static_cast<int64_t>(acc.Get(i)) + static_cast<int64_t>(want[i]))
                       : acc.Get(i) + RoundTo(t, want[i]);
        }
        ASSERT_THAT(BinaryScalar(op, in.blob(), s, left, OpReqType::kAddTo, acc.blob()), IsOk());
        ExpectNear(t, acc.All(), want_add, what + " addto", 2);
        const std::vector<double> before = acc.All();
        ASSERT_THAT(BinaryScalar(op, in.blob(), s, left, OpReqType::kNullOp, acc.blob()), IsOk());
        EXPECT_EQ(acc.All(), before);
        ASSERT_THAT(BinaryScalar(op, in.blob(), s, left, OpReqType::kWriteInplace, in.blob()),
                    IsOk());
        ExpectNear(t, in.All(), want, what + " inplace");
      }
    }
  }
}

TEST(BinaryScalarTest, ScalarTakesTheArrayType) {
  std::vector<int32_t> in = {5, 7}, out(2);
  ASSERT_THAT(BinaryScalar(BinaryOp::kMul, TBlob(in.data(), Shape{2}), 2.7, false,
                           OpReqType::kWriteTo, TBlob(out.data(), Shape{2})),
              IsOk());
  EXPECT_EQ(out, (std::vector<int32_t>{10, 14}));
  ASSERT_THAT(BinaryScalar(BinaryOp::kDiv, TBlob(in.data(), Shape{2}), 0, false,
                           OpReqType::kWriteTo, TBlob(out.data(), Shape{2})),
              IsOk());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 0}));
  EXPECT_THAT(
      BinaryScalar(BinaryOp::kMul, TBlob(in.data(), Shape{2}), 2, false, OpReqType::kWriteTo,
                   TBlob(out.data(), Shape{1, 2})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("(2,)"), HasSubstr("(1,2)"))));
}

// ---- reductions ---------------------------------------------------------------------------

std::vector<double> RefReduce(ReduceOp op, DType t, const Buf& in, const std::vector<int>& axes) {
  const int nd = in.shape.ndim();
  std::vector<bool> red(nd, axes.empty());
  for (int a : axes) red[a < 0 ? a + nd : a] = true;
  int64_t out_size = 1;
  for (int d = 0; d < nd; ++d) {
    if (!red[d]) out_size *= in.shape[d];
  }
  const int64_t count = in.size() / out_size;
  std::vector<double> acc(out_size, op == ReduceOp::kProd  ? 1
                                    : op == ReduceOp::kMax ? -INFINITY
                                    : op == ReduceOp::kMin ? INFINITY
                                                           : 0);
  std::vector<int64_t> iacc(out_size, op == ReduceOp::kProd  ? 1
                                      : op == ReduceOp::kMax ? INT64_MIN
                                      : op == ReduceOp::kMin ? INT64_MAX
                                                             : 0);
  for (int64_t i = 0; i < in.size(); ++i) {
    int64_t rest = i, o = 0, ostride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = rest % in.shape[d];
      rest /= in.shape[d];
      if (!red[d]) {
        o += idx * ostride;
        ostride *= in.shape[d];
      }
    }
    const double v = in.Get(i);
    const int64_t iv = static_cast<int64_t>(v);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        acc[o] += v;
        iacc[o] += iv;
        break;
      case ReduceOp::kProd:
        acc[o] *= v;
        iacc[o] *= iv;
        break;
      case ReduceOp::kMax:
        acc[o] = std::max(acc[o], v);
        iacc[o] = std::max(iacc[o], iv);
        break;
      case ReduceOp::kMin:
        acc[o] = std::min(acc[o], v);
        iacc[o] = std::min(iacc[o], iv);
        break;
    }
  }
  for (int64_t o = 0; o < out_size; ++o) {
    if (IsInt(t)) {
      acc[o] = WrapTo(t, op == ReduceOp::kMean ? iacc[o] / count : iacc[o]);
    } else if (op == ReduceOp::kMean) {
      acc[o] /= count;
    }
  }
  return acc;
}

struct ReduceCase {
  Shape in;
  std::vector<int> axes;
};

TEST(ReduceTest, AllOpsDtypesAxes) {
  const std::vector<ReduceCase> cases = {
      {{2, 3, 4}, {}},
      {{2, 3, 4}, {2}},
      {{2, 3, 4}, {0}},
      {{2, 3, 4}, {1}},
      {{2, 3, 4}, {0, 2}},
      {{2, 3, 4}, {-1, 0}},
      {{2, 3, 4}, {0, 1}},
      {{2, 3, 4}, {1, 2}},
      {{5, 1, 3}, {1}},
      {{5, 1, 3}, {0, 2}},
      {{37}, {0}},
      {{1}, {}},
      {{3, 2, 2, 5}, {1, 3}},
      {{300, 3}, {0}},
      {{3, 300}, {1}},
      {{2, 3, 4, 5, 2}, {0, 2, 4}},
  };
  std::mt19937_64 rng(5);
  for (DType t : kAllTypes) {
    for (int o = 0; o <= static_cast<int>(ReduceOp::kProd); ++o) {
      const ReduceOp op = static_cast<ReduceOp>(o);
      for (const ReduceCase& c : cases) {
        Buf in = op == ReduceOp::kProd ? (IsInt(t) ? RandomBuf(t, c.in, rng, -0.4, 0.4)
                                                   : RandomBuf(t, c.in, rng, 0.8, 1.25))
                                       : RandomBuf(t, c.in, rng);
        const std::vector<double> want = RefReduce(op, t, in, c.axes);
        // Keepdims-style output shape (axes set to 1) for even cases, dropped otherwise.
        Shape os;
        for (int d = 0; d < c.in.ndim(); ++d) {
          bool r = c.axes.empty();
          for (int a : c.axes) r = r || (a < 0 ? a + c.in.ndim() : a) == d;
          if (!r) {
            os.push_back(c.in[d]);
          } else if (o % 2 == 0) {
            os.push_back(1);
          }
        }
        if (os.ndim() == 0) os = Shape{1};
        const std::string what =
            absl::StrCat("reduce ", o, " ", c.in.ToString(), " axes ", c.axes.size());
        // Sums of up to 300 rounded terms: a few ulps more in the half types.
        const double scale = t == DType::kFloat32 || t == DType::kFloat64 ? 10 : 2;
        Buf out(t, os);
        for (int64_t i = 0; i < out.size(); ++i) out.Set(i, IsInt(t) ? 99 : NAN);
        ASSERT_THAT(Reduce(op, in.blob(), c.axes, OpReqType::kWriteTo, out.blob()), IsOk()) << what;
        ExpectNear(t, out.All(), want, what, scale);
        Buf acc = RandomBuf(t, os, rng);
        std::vector<double> want_add(acc.size());
        for (int64_t i = 0; i < acc.size(); ++i) {
          want_add[i] =
              IsInt(t) ? WrapTo(t, static_cast<int64_t>(acc.Get(i)) + static_cast<int64_t>(want[i]))
                       : acc.Get(i) + RoundTo(t, want[i]);
        }
        ASSERT_THAT(Reduce(op, in.blob(), c.axes, OpReqType::kAddTo, acc.blob()), IsOk());
        ExpectNear(t, acc.All(), want_add, what + " addto", 2 * scale);
        const std::vector<double> before = acc.All();
        ASSERT_THAT(Reduce(op, in.blob(), c.axes, OpReqType::kNullOp, acc.blob()), IsOk());
        EXPECT_EQ(acc.All(), before);
      }
    }
  }
}

TEST(ReduceTest, LongFloatSumKeepsPrecision) {
  std::vector<float> in(1 << 20, 0.1f);
  float out = 0;
  ASSERT_THAT(Reduce(ReduceOp::kSum, TBlob(in.data(), Shape{1 << 20}), {}, OpReqType::kWriteTo,
                     TBlob(&out, Shape{1})),
              IsOk());
  EXPECT_NEAR(out, 0.1f * static_cast<double>(1 << 20), 1e-6 * (1 << 20) * 0.1);
}

TEST(ReduceTest, MaxPropagatesNaN) {
  std::vector<double> in = {1, NAN, 3, 4, 5, 6};
  std::vector<double> out(2);
  ASSERT_THAT(Reduce(ReduceOp::kMax, TBlob(in.data(), Shape{2, 3}), {1}, OpReqType::kWriteTo,
                     TBlob(out.data(), Shape{2})),
              IsOk());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], 6);
}

TEST(ReduceTest, Errors) {
  std::vector<float> in(24), out(24);
  const TBlob x(in.data(), Shape{2, 3, 4});
  EXPECT_THAT(Reduce(ReduceOp::kSum, x, {3}, OpReqType::kWriteTo, TBlob(out.data(), Shape{1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("axis 3"), HasSubstr("(2,3,4)"))));
  EXPECT_THAT(Reduce(ReduceOp::kSum, x, {1, -2}, OpReqType::kWriteTo, TBlob(out.data(), Shape{8})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate axis")));
  EXPECT_THAT(Reduce(ReduceOp::kSum, x, {1}, OpReqType::kWriteTo, TBlob(out.data(), Shape{2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("(2,3,4)"), HasSubstr("(2,3)"))));
  std::vector<double> d(8);
  EXPECT_THAT(Reduce(ReduceOp::kSum, x, {1}, OpReqType::kWriteTo, TBlob(d.data(), Shape{2, 4})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float64")));
}

TEST(SumToShapeTest, ReducesBroadcastDims) {
  std::mt19937_64 rng(9);
  const Shape in_shape{2, 3, 4};
  const std::vector<Shape> targets = {{3, 1}, {4}, {1}, {2, 1, 4}, {2, 3, 4}, {1, 3, 1}, {1, 1, 1}};
  for (DType t : {DType::kFloat64, DType::kFloat32, DType::kInt32, DType::kFloat16}) {
    for (const Shape& target : targets) {
      Buf in = RandomBuf(t, in_shape, rng);
      std::vector<double> want(target.Size(), 0);
      for (int64_t i = 0; i < in.size(); ++i) {
        want[BroadcastOffset(in_shape, i, target)] += in.Get(i);
      }
      Buf out(t, target);
      ASSERT_THAT(SumToShape(in.blob(), OpReqType::kWriteTo, out.blob()), IsOk());
      ExpectNear(t, out.All(), want, "sum_to " + target.ToString(), 4);
      Buf acc(t, target);
      for (int64_t i = 0; i < acc.size(); ++i) acc.Set(i, 1);
      for (double& w : want) w = RoundTo(t, w) + 1;
      ASSERT_THAT(SumToShape(in.blob(), OpReqType::kAddTo, acc.blob()), IsOk());
      ExpectNear(t, acc.All(), want, "sum_to addto " + target.ToString(), 8);
    }
  }
  std::vector<float> a(6), b(4);
  EXPECT_THAT(
      SumToShape(TBlob(a.data(), Shape{2, 3}), OpReqType::kWriteTo, TBlob(b.data(), Shape{4})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("(4,)"), HasSubstr("(2,3)"))));
  EXPECT_THAT(
      SumToShape(TBlob(a.data(), Shape{6}), OpReqType::kWriteTo, TBlob(b.data(), Shape{1, 1})),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---- GEMM ---------------------------------------------------------------------------------

TEST(GemmTest, AllTransposesAndDtypes) {
  std::mt19937_64 rng(11);
  const int64_t m = 13, n = 9, k = 300;
  for (DType t : {DType::kFloat64, DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (double beta : {0.0, 1.0, -0.5}) {
          Buf a = RandomBuf(t, ta ? Shape{k, m} : Shape{m, k}, rng, -1, 1);
          Buf b = RandomBuf(t, tb ? Shape{n, k} : Shape{k, n}, rng, -1, 1);
          Buf c = RandomBuf(t, Shape{m, n}, rng, -1, 1);
          if (beta == 0) {
            for (int64_t i = 0; i < c.size(); ++i) c.Set(i, NAN);
          }
          const double alpha = 0.75;
          std::vector<double> want(m * n);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double s = 0, sa = 0;
              for (int64_t p = 0; p < k; ++p) {
                const double x = a.Get(ta ? p * m + i : i * k + p);
                const double y = b.Get(tb ? j * k + p : p * n + j);
                s += x * y;
                sa += std::fabs(x * y);
              }
              want[i * n + j] = alpha * s + (beta == 0 ? 0 : beta * c.Get(i * n + j));
              (void)sa;
            }
          }
          ASSERT_THAT(Gemm(ta, tb, alpha, a.blob(), b.blob(), beta, c.blob()), IsOk());
          // A dot of 300 terms of size ~1: absolute error ~ sqrt(k) ulps of the result type.
          const double tol = t == DType::kFloat64 ? 1e-12 : t == DType::kFloat32 ? 1e-5 : 0.1;
          const std::vector<double> got = c.All();
          for (int64_t i = 0; i < m * n; ++i) {
            EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i])))
                << DTypeName(t) << " ta " << ta << " tb " << tb << " beta " << beta;
          }
        }
      }
    }
  }
}

TEST(GemmTest, LargeFloat32MatchesFloat64) {
  std::mt19937_64 rng(12);
  const int64_t m = 130, n = 70, k = 257;
  Buf a = RandomBuf(DType::kFloat64, Shape{m, k}, rng),
      b = RandomBuf(DType::kFloat64, Shape{n, k}, rng);
  Buf af(DType::kFloat32, a.shape), bf(DType::kFloat32, b.shape);
  af.SetAll(a.All());
  bf.SetAll(b.All());
  a.SetAll(af.All());  // same values in both
  b.SetAll(bf.All());
  Buf c(DType::kFloat64, Shape{m, n}), cf(DType::kFloat32, Shape{m, n});
  ASSERT_THAT(Gemm(false, true, 1, a.blob(), b.blob(), 0, c.blob()), IsOk());
  ASSERT_THAT(Gemm(false, true, 1, af.blob(), bf.blob(), 0, cf.blob()), IsOk());
  ExpectNear(DType::kFloat32, cf.All(), c.All(), "sgemm vs dgemm", 50);
}

TEST(GemmTest, Errors) {
  std::vector<float> a(6), b(6), c(4);
  std::vector<int32_t> ia(6), ib(6), ic(4);
  EXPECT_THAT(Gemm(false, false, 1, TBlob(a.data(), Shape{2, 3}), TBlob(b.data(), Shape{2, 3}), 0,
                   TBlob(c.data(), Shape{2, 2})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("a (2,3)"), HasSubstr("b (2,3)"), HasSubstr("c (2,2)"))));
  EXPECT_THAT(Gemm(false, true, 1, TBlob(a.data(), Shape{2, 3}), TBlob(b.data(), Shape{2, 3}), 0,
                   TBlob(c.data(), Shape{4})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2-D")));
  EXPECT_THAT(Gemm(false, true, 1, TBlob(ia.data(), Shape{2, 3}), TBlob(ib.data(), Shape{2, 3}), 0,
                   TBlob(ic.data(), Shape{2, 2})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int32")));
  EXPECT_THAT(Gemm(false, true, 1, TBlob(a.data(), Shape{2, 3}, Context::GPU(1)),
                   TBlob(b.data(), Shape{2, 3}), 0, TBlob(c.data(), Shape{2, 2})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gpu(1)")));
  // transpose_b makes it consistent.
  EXPECT_THAT(Gemm(false, true, 1, TBlob(a.data(), Shape{2, 3}), TBlob(b.data(), Shape{2, 3}), 0,
                   TBlob(c.data(), Shape{2, 2})),
              IsOk());
}

// ---- Cast, Fill, Copy ---------------------------------------------------------------------

TEST(CastTest, AllPairsOfDtypes) {
  const std::vector<double> values = {0, 1, 2, 3, 17, 100, 127, 5};
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      Buf in(from, Shape{2, 4}), out(to, Shape{2, 4});
      in.SetAll(values);
      ASSERT_THAT(Cast(in.blob(), out.blob()), IsOk());
      EXPECT_EQ(out.All(), values) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST(CastTest, FloatToIntegerSaturatesAndNaNIsZero) {
  std::vector<float> in = {300.7f, -5.5f, NAN, 2.9f, -2.9f, 1e30f, -1e30f};
  std::vector<uint8_t> u(7);
  std::vector<int32_t> i(7);
  ASSERT_THAT(Cast(TBlob(in.data(), Shape{7}), TBlob(u.data(), Shape{7})), IsOk());
  EXPECT_EQ(u, (std::vector<uint8_t>{255, 0, 0, 2, 0, 255, 0}));
  ASSERT_THAT(Cast(TBlob(in.data(), Shape{7}), TBlob(i.data(), Shape{7})), IsOk());
  EXPECT_EQ(i, (std::vector<int32_t>{300, -5, 0, 2, -2, std::numeric_limits<int32_t>::max(),
                                     std::numeric_limits<int32_t>::min()}));
  std::vector<double> d(3);
  EXPECT_THAT(
      Cast(TBlob(in.data(), Shape{7}), TBlob(d.data(), Shape{3})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("(7,)"), HasSubstr("(3,)"))));
}

TEST(FillTest, EveryDtype) {
  for (DType t : kAllTypes) {
    Buf b(t, Shape{3, 5});
    ASSERT_THAT(Fill(b.blob(), 2.5), IsOk());
    const double want = IsInt(t) ? 2 : 2.5;
    EXPECT_EQ(b.All(), std::vector<double>(15, want)) << DTypeName(t);
  }
  std::vector<float> x(2);
  EXPECT_THAT(Fill(TBlob(x.data(), Shape{2}, Context::GPU()), 1),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(CopyTest, ReqTypesAndErrors) {
  std::mt19937_64 rng(13);
  for (DType t : kAllTypes) {
    Buf in = RandomBuf(t, Shape{4, 6}, rng), out = RandomBuf(t, Shape{4, 6}, rng);
    const std::vector<double> before = out.All();
    ASSERT_THAT(Copy(in.blob(), OpReqType::kNullOp, out.blob()), IsOk());
    EXPECT_EQ(out.All(), before);
    ASSERT_THAT(Copy(in.blob(), OpReqType::kAddTo, out.blob()), IsOk());
    std::vector<double> want(24);
    for (int i = 0; i < 24; ++i) {
      want[i] = IsInt(t)
                    ? WrapTo(t, static_cast<int64_t>(before[i]) + static_cast<int64_t>(in.Get(i)))
                    : before[i] + in.Get(i);
    }
    ExpectNear(t, out.All(), want, "copy addto", 2);
    ASSERT_THAT(Copy(in.blob(), OpReqType::kWriteTo, out.blob()), IsOk());
    EXPECT_EQ(out.All(), in.All());
    ASSERT_THAT(Copy(in.blob(), OpReqType::kWriteInplace, in.blob()), IsOk());
    EXPECT_EQ(out.All(), in.All());
  }
  std::vector<float> a(6);
  std::vector<int8_t> b(6);
  EXPECT_THAT(
      Copy(TBlob(a.data(), Shape{6}), OpReqType::kWriteTo, TBlob(b.data(), Shape{6})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("float32"), HasSubstr("int8"))));
  EXPECT_THAT(Copy(TBlob(a.data(), Shape{6}), OpReqType::kWriteTo, TBlob(a.data(), Shape{2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(2,3)")));
}

// Cast's many-at-a-time conversions between float32 and the 16-bit types (F16C where the CPU
// has it) give the scalar conversions' bits: every float16 and bfloat16 value, and floats
// across every exponent, rounding ties, subnormals, the overflow edge and the specials. NaNs
// only need to stay NaNs (F16C keeps a payload the scalar code drops).
TEST(CastTest, BulkHalfConversionsEqualTheScalarOnes) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  for (DType type : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    ASSERT_THAT(Cast(TBlob(all.data(), Shape{65536}, type), TBlob(wide.data(), Shape{65536}, DType::kFloat32)),
                tessera::testing::IsOk());
    for (uint32_t i = 0; i < 65536; ++i) {
      Half h;
      BFloat16 b;
      h.bits = b.bits = static_cast<uint16_t>(i);
      const float want = type == DType::kFloat16 ? static_cast<float>(h) : static_cast<float>(b);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(wide[i])) << i;
      } else {
        ASSERT_EQ(std::memcmp(&want, &wide[i], 4), 0) << i;
      }
    }
  }
  std::mt19937 rng(5);
  std::vector<float> floats = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f, 5.96e-8f,
                               2.98e-8f, 6.1e-5f, std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                               1.00390625f, 1.01171875f, 3.0e38f, -1.5e-40f};
  while (floats.size() < 200000) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    floats.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(floats.size());
  std::vector<uint16_t> narrow(floats.size());
  for (DType type : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    ASSERT_THAT(Cast(TBlob(floats.data(), Shape{n}, DType::kFloat32), TBlob(narrow.data(), Shape{n}, type)),
                tessera::testing::IsOk());
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = type == DType::kFloat16 ? Half(floats[i]).bits : BFloat16(floats[i]).bits;
      if (std::isnan(floats[i])) {
        const bool nan = type == DType::kFloat16 ? (narrow[i] & 0x7c00) == 0x7c00 && (narrow[i] & 0x3ff) != 0
                                                 : (narrow[i] & 0x7f80) == 0x7f80 && (narrow[i] & 0x7f) != 0;
        ASSERT_TRUE(nan) << i;
      } else {
        ASSERT_EQ(narrow[i], want) << i << ": " << floats[i];
      }
    }
  }
}

}  // namespace
}  // namespace tessera::math

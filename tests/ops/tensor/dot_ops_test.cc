// dot and batch_dot: forward against float64 loops for every transpose combination and N-D
// flattening, backward against finite differences, and shape errors.
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/registry.h"
#include "tests/ops/op_check.h"
#include "tests/ops/tensor/test_util.h"

namespace tessera::ops::testing {
namespace {

using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// C[b] = op(A[b]) op(B[b]) for stored 2-D (m or k first) matrices.
Values MatMul(const double* a, const double* b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  Values c(m * n, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        c[i * n + j] += a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * n + j];
      }
    }
  }
  return c;
}

KwArgs Flags(bool ta, bool tb) {
  return {{"transpose_a", ta ? "true" : "false"}, {"transpose_b", tb ? "true" : "false"}};
}

TEST(DotOpTest, TwoDAllTransposes) {
  const int64_t m = 3, n = 4, k = 5;
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ta=", ta, " tb=", tb));
        auto c =
            MakeChecker("dot", Flags(ta, tb),
                        {ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}}, dtype);
        ASSERT_NE(c, nullptr);
        EXPECT_EQ(c->out_shapes()[0], (Shape{m, n}));
        const double tol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
        c->CheckForward(
            [&](const std::vector<Values>& in, const std::vector<Shape>&) {
              return std::vector<Values>{MatMul(in[0].data(), in[1].data(), m, n, k, ta, tb)};
            },
            {tol, tol});
        if (dtype == DType::kFloat64) {
          c->CheckBackward({1e-6, 1e-8});
        } else {
          c->CheckBackward({1e-2, 1e-3});
        }
      }
    }
  }
}

TEST(DotOpTest, NDFlattening) {
  struct Case {
    Shape lhs, rhs;
    bool ta, tb;
    Shape out;
    int64_t m, n, k;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {4, 5}, false, false, {2, 3, 5}, 6, 5, 4},
      {{2, 3, 4}, {4, 5, 2}, false, false, {2, 3, 5, 2}, 6, 10, 4},
      {{4, 2, 3}, {4, 5}, true, false, {2, 3, 5}, 6, 5, 4},
      {{2, 3, 4}, {5, 2, 4}, false, true, {2, 3, 5, 2}, 6, 10, 4},
      {{4}, {4}, false, false, {1}, 1, 1, 4},
      {{4}, {4, 3}, false, false, {3}, 1, 3, 4},
      {{3, 4}, {4}, false, false, {3}, 3, 1, 4},
  };
  for (const Case& t : cases) {
    SCOPED_TRACE(absl::StrCat(t.lhs.ToString(), " x ", t.rhs.ToString()));
    auto c = MakeChecker("dot", Flags(t.ta, t.tb), {t.lhs, t.rhs}, DType::kFloat64);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->out_shapes()[0], t.out);
    const bool tb_eff = t.tb && t.rhs.ndim() > 1;
    c->CheckForward(
        [&](const std::vector<Values>& in, const std::vector<Shape>&) {
          return std::vector<Values>{
              MatMul(in[0].data(), in[1].data(), t.m, t.n, t.k, t.ta, tb_eff)};
        },
        {1e-12, 1e-12});
    c->CheckBackward({1e-6, 1e-8});
  }
}

TEST(BatchDotOpTest, AllTransposes) {
  const int64_t b = 3, m = 2, n = 4, k = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(absl::StrCat("ta=", ta, " tb=", tb));
      auto c =
          MakeChecker("batch_dot", Flags(ta, tb),
                      {ta ? Shape{b, k, m} : Shape{b, m, k}, tb ? Shape{b, n, k} : Shape{b, k, n}},
                      DType::kFloat64);
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->out_shapes()[0], (Shape{b, m, n}));
      c->CheckForward(
          [&](const std::vector<Values>& in, const std::vector<Shape>&) {
            Values out;
            for (int64_t i = 0; i < b; ++i) {
              Values y =
                  MatMul(in[0].data() + i * m * k, in[1].data() + i * k * n, m, n, k, ta, tb);
              out.insert(out.end(), y.begin(), y.end());
            }
            return std::vector<Values>{out};
          },
          {1e-12, 1e-12});
      c->CheckBackward({1e-6, 1e-8});
    }
  }
}

TEST(DotOpTest, ShapeErrorsAndParams) {
  auto dot = OpRegistry::Global().Create("dot", {});
  ASSERT_TRUE(dot.ok());
  std::vector<Shape> in = {Shape{2, 3}, Shape{4, 5}}, out(1), aux;
  EXPECT_THAT((*dot)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dot"), HasSubstr("lhs (2,3)"), HasSubstr("rhs (4,5)"),
                             HasSubstr("3 and 4"))));
  in = {Shape{2, 3}, Shape()};
  auto known = (*dot)->InferShape(&in, &out, &aux);
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known);

  auto bdot = OpRegistry::Global().Create("batch_dot", {});
  ASSERT_TRUE(bdot.ok());
  in = {Shape{2, 3, 4}, Shape{3, 4, 5}};
  EXPECT_THAT((*bdot)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("batch_dot"), HasSubstr("batch sizes"))));
  in = {Shape{3, 4}, Shape{4, 5}};
  EXPECT_THAT((*bdot)->InferShape(&in, &out, &aux),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3-D")));
  EXPECT_THAT(OpRegistry::Global().Create("dot", {{"transpose_a", "maybe"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dot"), HasSubstr("transpose_a"))));
  EXPECT_THAT(OpRegistry::Global().Create("batch_dot", {{"transpose_c", "1"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("transpose_c")));
}

}  // namespace
}  // namespace tessera::ops::testing

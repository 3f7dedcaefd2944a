// Concat, SliceChannel and ElementWiseSum (add_n): the operators that join, split and add
// several arrays. Values against float64 references, gradients by finite differences,
// forward and backward shape inference and its errors.
#include <memory>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/array/array_test_util.h"

namespace tessera::ops::testing {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Concatenation of `in` (shapes `shapes`) along `axis`, in float64.
Values ConcatRef(const std::vector<Values>& in, const std::vector<Shape>& shapes, int axis) {
  const int64_t outer = shapes[0].ProdRange(0, axis);
  Values out;
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < in.size(); ++k) {
      const int64_t block = shapes[k].ProdRange(axis, shapes[k].ndim());
      out.insert(out.end(), in[k].begin() + o * block, in[k].begin() + (o + 1) * block);
    }
  }
  return out;
}

TEST(ConcatTest, AlongEachAxis) {
  struct Case {
    std::string dim;
    int axis;
    std::vector<Shape> in;
    Shape want;
  };
  for (const Case& tc :
       {Case{"1", 1, {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}, {2, 6, 4}},
        Case{"0", 0, {{1, 3}, {2, 3}}, {3, 3}}, Case{"-1", 2, {{2, 2, 1}, {2, 2, 3}}, {2, 2, 4}},
        Case{"0", 0, {{5}}, {5}}}) {
    auto c =
        MakeChecker("Concat", {{"num_args", std::to_string(tc.in.size())}, {"dim", tc.dim}}, tc.in);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->out_shapes()[0], tc.want);
    c->CheckForward([&](const auto& in, const auto& shapes) {
      return std::vector<Values>{ConcatRef(in, shapes, tc.axis)};
    });
    c->CheckBackward();
  }
  auto c = MakeChecker("Concat", {{"num_args", "2"}}, {{3, 2}, {3, 5}}, DType::kFloat32);
  ASSERT_NE(c, nullptr);
  c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
}

TEST(ConcatTest, ArgumentNames) {
  auto prop = OpRegistry::Global().Create("Concat", {{"num_args", "3"}});
  ASSERT_THAT(prop, IsOk());
  EXPECT_EQ((*prop)->ListArguments(), (std::vector<std::string>{"arg0", "arg1", "arg2"}));
}

TEST(ConcatTest, InfersAMissingArgumentFromTheOutput) {
  std::vector<Shape> in = {{2, 3, 4}, {}, {2, 2, 4}}, out = {{2, 10, 4}};
  auto known = InferShapes("Concat", {{"num_args", "3"}}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  EXPECT_EQ(in[1], (Shape{2, 5, 4}));
  // Without the output, not enough is known yet.
  in = {{2, 3, 4}, {}, {2, 2, 4}};
  out = {{}};
  known = InferShapes("Concat", {{"num_args", "3"}}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_FALSE(*known);
  EXPECT_EQ(in[1], (Shape{2, 0, 4}));  // but the other dimensions are filled in
}

TEST(ConcatTest, ShapeErrors) {
  std::vector<Shape> in = {{2, 3, 4}, {2, 3, 5}}, out;
  EXPECT_THAT(InferShapes("Concat", {{"num_args", "2"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Concat"), HasSubstr("arg1"), HasSubstr("(2,3,5)"),
                             HasSubstr("arg0"), HasSubstr("(2,3,4)"))));
  in = {{2, 3}, {2, 3, 1}};
  EXPECT_THAT(InferShapes("Concat", {{"num_args", "2"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  in = {{2, 3}, {2, 3}};
  out = {{2, 7}};
  EXPECT_THAT(InferShapes("Concat", {{"num_args", "2"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output"), HasSubstr("(2,6)"), HasSubstr("(2,7)"))));
  in = {{2, 3}, {2, 3}};
  out = {{}};
  EXPECT_THAT(InferShapes("Concat", {{"num_args", "2"}, {"dim", "2"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim 2")));
  EXPECT_THAT(OpRegistry::Global().Create("Concat", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_args")));
  EXPECT_THAT(OpRegistry::Global().Create("Concat", {{"num_args", "0"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_args")));
}

// Piece k of `x` (shape s) cut into n along `axis`.
Values SliceRef(const Values& x, const Shape& s, int axis, int n, int k) {
  const int64_t outer = s.ProdRange(0, axis);
  const int64_t block = s[axis] / n * s.ProdRange(axis + 1, s.ndim());
  Values out;
  for (int64_t o = 0; o < outer; ++o) {
    const auto begin = x.begin() + (o * n + k) * block;
    out.insert(out.end(), begin, begin + block);
  }
  return out;
}

TEST(SliceChannelTest, SplitsAndJoinsGradients) {
  struct Case {
    KwArgs kwargs;
    Shape in;
    int axis, n;
    Shape piece;
  };
  for (const Case& tc :
       {Case{{{"num_outputs", "3"}}, {2, 6, 4}, 1, 3, {2, 2, 4}},
        Case{{{"num_outputs", "2"}, {"axis", "0"}}, {4, 3}, 0, 2, {2, 3}},
        Case{{{"num_outputs", "2"}, {"axis", "-1"}}, {3, 2, 4}, 2, 2, {3, 2, 2}},
        Case{{{"num_outputs", "3"}, {"squeeze_axis", "true"}}, {2, 3, 4}, 1, 3, {2, 4}}}) {
    auto c = MakeChecker("SliceChannel", tc.kwargs, {tc.in});
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(static_cast<int>(c->out_shapes().size()), tc.n);
    for (const Shape& s : c->out_shapes()) EXPECT_EQ(s, tc.piece);
    c->CheckForward([&](const auto& in, const auto& shapes) {
      std::vector<Values> out;
      for (int k = 0; k < tc.n; ++k) out.push_back(SliceRef(in[0], shapes[0], tc.axis, tc.n, k));
      return out;
    });
    c->CheckBackward();
  }
}

TEST(SliceChannelTest, ShapeInference) {
  auto prop = OpRegistry::Global().Create("SliceChannel", {{"num_outputs", "2"}});
  ASSERT_THAT(prop, IsOk());
  EXPECT_EQ((*prop)->ListOutputs(), (std::vector<std::string>{"output0", "output1"}));

  std::vector<Shape> in = {{2, 5}}, out;
  EXPECT_THAT(
      InferShapes("SliceChannel", {{"num_outputs", "2"}}, &in, &out),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("SliceChannel"), HasSubstr("(2,5)"), HasSubstr("not divisible"))));
  in = {{2, 4}};
  EXPECT_THAT(InferShapes("SliceChannel", {{"num_outputs", "2"}, {"squeeze_axis", "1"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("squeeze_axis")));
  in = {{2, 4}};
  out = {{2, 3}, {}};
  EXPECT_THAT(InferShapes("SliceChannel", {{"num_outputs", "2"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output0"), HasSubstr("(2,2)"), HasSubstr("(2,3)"))));
  // From an output back to the data.
  in = {{}};
  out = {{}, {2, 4}};
  auto known =
      InferShapes("SliceChannel", {{"num_outputs", "3"}, {"squeeze_axis", "1"}}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_TRUE(*known);
  EXPECT_EQ(in[0], (Shape{2, 3, 4}));
  EXPECT_EQ(out[0], (Shape{2, 4}));
}

TEST(ElementWiseSumTest, AddsAndCopiesGradients) {
  for (int n : {1, 2, 3, 5}) {
    auto c = MakeChecker("ElementWiseSum", {{"num_args", std::to_string(n)}},
                         std::vector<Shape>(n, Shape{3, 4}));
    ASSERT_NE(c, nullptr);
    c->CheckForward([](const auto& in, const auto&) {
      Values y(in[0].size(), 0.0);
      for (const Values& v : in) {
        for (size_t i = 0; i < y.size(); ++i) y[i] += v[i];
      }
      return std::vector<Values>{y};
    });
    c->CheckBackward();
  }
}

TEST(ElementWiseSumTest, AddNAliasAndOtherTypes) {
  auto c = MakeChecker("add_n", {{"num_args", "3"}}, {{2, 5}, {}, {}}, DType::kFloat32);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->in_shapes()[2], (Shape{2, 5}));
  c->CheckBackward({.rtol = 1e-2, .atol = 1e-3});
  auto i = MakeChecker("ElementWiseSum", {{"num_args", "3"}}, {{4}, {4}, {4}}, DType::kInt32);
  ASSERT_NE(i, nullptr);
  for (int k = 0; k < 3; ++k) i->SetInput(k, {1.0 * k, 2, 3, -4});
  i->CheckForward(
      [](const auto&, const auto&) {
        return std::vector<Values>{{3, 6, 9, -12}};
      },
      {0, 0});
  auto h = MakeChecker("ElementWiseSum", {{"num_args", "4"}}, std::vector<Shape>(4, Shape{8}),
                       DType::kBFloat16);
  ASSERT_NE(h, nullptr);
  h->CheckForward(
      [](const auto& in, const auto&) {
        Values y(8, 0.0);
        for (const Values& v : in) {
          for (int k = 0; k < 8; ++k) y[k] += v[k];
        }
        return std::vector<Values>{y};
      },
      {.rtol = 2e-2, .atol = 2e-2});
}

TEST(ElementWiseSumTest, ShapeErrorsNameTheArgument) {
  std::vector<Shape> in = {{2, 3}, {2, 3}, {3, 2}}, out;
  EXPECT_THAT(InferShapes("ElementWiseSum", {{"num_args", "3"}}, &in, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ElementWiseSum"), HasSubstr("arg2"), HasSubstr("(3,2)"),
                             HasSubstr("(2,3)"))));
  in = {{}, {}};
  out = {{}};
  auto known = InferShapes("ElementWiseSum", {{"num_args", "2"}}, &in, &out);
  ASSERT_THAT(known, IsOk());
  EXPECT_FALSE(*known);
}

}  // namespace
}  // namespace tessera::ops::testing

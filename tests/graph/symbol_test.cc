// Symbol composition, listing, attributes and partial shape/type inference.
#include "graph/symbol.h"

#include "core/status_matchers.h"
#include "examples/models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::IsOk;
using testing::StatusIs;

Symbol Fc(const Symbol& x, int hidden, const std::string& name) {
  auto s = Symbol::Create("FullyConnected", {{"num_hidden", std::to_string(hidden)}}, {x}, name);
  EXPECT_THAT(s.status(), IsOk());
  return *s;
}

TEST(SymbolTest, CompositionCreatesMissingInputsAsVariables) {
  Symbol data = Symbol::Variable("data");
  Symbol fc1 = Fc(data, 128, "fc1");
  auto act = Symbol::Create("Activation", {{"act_type", "relu"}}, {{"data", fc1}}, "relu1");
  ASSERT_THAT(act.status(), IsOk());
  Symbol fc2 = Fc(*act, 10, "fc2");
  EXPECT_THAT(fc2.ListArguments(), ElementsAre("data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"));
  EXPECT_THAT(fc2.ListOutputs(), ElementsAre("fc2_output"));
  EXPECT_TRUE(fc2.ListAuxiliaryStates().empty());
}

TEST(SymbolTest, NamedInputsMayOverrideParameters) {
  Symbol data = Symbol::Variable("data");
  Symbol shared = Symbol::Variable("shared_weight");
  auto fc = Symbol::Create("FullyConnected", {{"num_hidden", "4"}, {"no_bias", "true"}},
                           {data, {"weight", shared}}, "fc");
  ASSERT_THAT(fc.status(), IsOk());
  EXPECT_THAT(fc->ListArguments(), ElementsAre("data", "shared_weight"));
}

TEST(SymbolTest, UnnamedNodesGetUniqueNames) {
  Symbol data = Symbol::Variable("data");
  auto a = Symbol::Create("Activation", {{"act_type", "relu"}}, {data});
  auto b = Symbol::Create("Activation", {{"act_type", "relu"}}, {data});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_THAT(a->ListOutputs()[0], StartsWith("activation"));
  EXPECT_NE(a->ListOutputs()[0], b->ListOutputs()[0]);
}

TEST(SymbolTest, BatchNormListsAuxiliaryStates) {
  auto bn = Symbol::Create("BatchNorm", {}, {Symbol::Variable("data")}, "bn");
  ASSERT_THAT(bn.status(), IsOk());
  EXPECT_THAT(bn->ListArguments(), ElementsAre("data", "bn_gamma", "bn_beta"));
  EXPECT_THAT(bn->ListAuxiliaryStates(), ElementsAre("bn_moving_mean", "bn_moving_var"));
}

TEST(SymbolTest, MultiOutputIndexingAndGroup) {
  auto split = Symbol::Create("SliceChannel", {{"num_outputs", "3"}}, {Symbol::Variable("x")}, "split");
  ASSERT_THAT(split.status(), IsOk());
  EXPECT_THAT(split->ListOutputs(), ElementsAre("split_output0", "split_output1", "split_output2"));
  auto second = (*split)[1];
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_THAT(second->ListOutputs(), ElementsAre("split_output1"));
  EXPECT_THAT((*split)[3].status(), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("split_output2")));
  auto by_name = split->GetOutput("split_output2");
  ASSERT_THAT(by_name.status(), IsOk());
  EXPECT_THAT(split->GetOutput("nope").status(), StatusIs(absl::StatusCode::kNotFound));
  // A multi-output symbol cannot feed a single input.
  auto bad = Symbol::Create("Activation", {{"act_type", "relu"}}, {*split}, "act");
  EXPECT_THAT(bad.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     ::testing::AllOf(HasSubstr("'act'"), HasSubstr("3 outputs"))));
  Symbol group = Symbol::Group({*second, Symbol::Variable("y")});
  EXPECT_THAT(group.ListOutputs(), ElementsAre("split_output1", "y"));
  EXPECT_THAT(group.ListArguments(), ElementsAre("x", "y"));
}

TEST(SymbolTest, InternalsListEveryOutput) {
  auto net = examples::Mlp(1, 8);
  ASSERT_THAT(net.status(), IsOk());
  EXPECT_THAT(net->GetInternals().ListOutputs(),
              ElementsAre("data", "fc1_weight", "fc1_bias", "fc1_output", "relu1_output", "fc2_weight",
                          "fc2_bias", "fc2_output", "softmax_label", "softmax_output"));
}

TEST(SymbolTest, CompositionErrorsNameTheNode) {
  Symbol x = Symbol::Variable("x");
  EXPECT_THAT(Symbol::Create("NoSuchOp", {}, {x}, "n1").status(),
              StatusIs(absl::StatusCode::kNotFound, ::testing::AllOf(HasSubstr("'n1'"), HasSubstr("NoSuchOp"))));
  EXPECT_THAT(Symbol::Create("FullyConnected", {{"num_hidden", "x"}}, {x}, "fc").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::AllOf(HasSubstr("'fc'"), HasSubstr("num_hidden"))));
  EXPECT_THAT(Symbol::Create("Activation", {{"act_type", "relu"}}, {{"input", x}}, "a").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no input named 'input'")));
  EXPECT_THAT(Symbol::Create("Activation", {{"act_type", "relu"}}, {x, {"data", x}}, "a").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'data' given twice")));
  EXPECT_THAT(Symbol::Create("Activation", {{"act_type", "relu"}}, {x, x}, "a").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got 2 inputs, but takes 1")));
}

TEST(SymbolTest, AttributesAcceptBothSpellings) {
  Symbol w = Symbol::Variable("w", {{"lr_mult", "2"}, {"__wd_mult__", "0"}});
  EXPECT_EQ(w.GetAttr("lr_mult"), "2");
  EXPECT_EQ(w.GetAttr("__lr_mult__"), "2");
  EXPECT_EQ(w.GetAttr("wd_mult"), "0");
  EXPECT_FALSE(w.GetAttr("ctx_group").has_value());
  auto fc = Symbol::Create("FullyConnected", {{"num_hidden", "3"}}, {Symbol::Variable("d"), {"weight", w}},
                           "fc", {{"ctx_group", "dev1"}});
  ASSERT_THAT(fc.status(), IsOk());
  fc->SetAttr("mirror_stage", "True");
  const auto attrs = fc->ListAttrs();
  EXPECT_EQ(attrs.at("fc").at("__ctx_group__"), "dev1");
  EXPECT_EQ(attrs.at("fc").at("__mirror_stage__"), "True");
  EXPECT_EQ(attrs.at("w").at("__lr_mult__"), "2");
}

TEST(SymbolTest, PartialShapeInference) {
  auto net = examples::Mlp(1, 16);
  ASSERT_THAT(net.status(), IsOk());
  // Nothing known: nothing inferred, not an error.
  auto none = net->InferShape({});
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_FALSE(none->complete);
  auto full = net->InferShape({{"data", Shape{8, 784}}});
  ASSERT_THAT(full.status(), IsOk());
  EXPECT_TRUE(full->complete);
  EXPECT_THAT(full->arguments, ElementsAre(Shape{8, 784}, Shape{16, 784}, Shape{16}, Shape{10, 16},
                                           Shape{10}, Shape{8}));
  EXPECT_THAT(full->outputs, ElementsAre(Shape{8, 10}));
  // A weight shape alone cannot give the batch size.
  auto partial = net->InferShape({{"fc1_weight", Shape{16, 784}}});
  ASSERT_THAT(partial.status(), IsOk());
  EXPECT_FALSE(partial->complete);
  EXPECT_EQ(partial->arguments[1], (Shape{16, 784}));
}

TEST(SymbolTest, ShapeAttributeSeedsInference) {
  Symbol data = Symbol::Variable("data", {{"__shape__", "(4,3)"}});
  Symbol fc = Fc(data, 2, "fc");
  auto r = fc.InferShape({});
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->outputs[0], (Shape{4, 2}));
}

TEST(SymbolTest, InconsistentShapesNameTheNodeAndBothShapes) {
  auto net = examples::Mlp(2, 16);
  ASSERT_THAT(net.status(), IsOk());
  auto r = net->InferShape({{"data", Shape{8, 784}}, {"fc2_weight", Shape{16, 100}}});
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                   ::testing::AllOf(HasSubstr("'fc2'"), HasSubstr("(16,16)"), HasSubstr("(16,100)"))));
  EXPECT_THAT(net->InferShape({{"date", Shape{8, 784}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'date' is not an argument")));
}

TEST(SymbolTest, TypeInference) {
  auto net = examples::Mlp(1, 16);
  ASSERT_THAT(net.status(), IsOk());
  auto r = net->InferType({{"data", DType::kFloat32}});
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->outputs[0], DType::kFloat32);
  auto bad = net->InferType({{"data", DType::kFloat32}, {"fc1_weight", DType::kFloat64}});
  EXPECT_THAT(bad.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fc1'")));
}

}  // namespace
}  // namespace tessera::graph

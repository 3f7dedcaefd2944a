// GraphDef: symbols (the MXNet test files and one composed in C++) survive a trip through
// the protobuf and its wire bytes, and a bad GraphDef fails like bad JSON does.
#include "graph/graph_def.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "graph/symbol_json.h"
#include "gtest/gtest.h"
#include "tests/graph/io/io_test_util.h"

namespace tessera::graph {
namespace {

using ::tessera::graph::testing::DescribeGraph;
using ::tessera::graph::testing::MakeComposedSymbol;
using ::tessera::graph::testing::TestDataPath;
using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// To a GraphDef, to bytes, back: the same graph.
void ExpectGraphDefRoundTrip(const Symbol& symbol) {
  std::string bytes;
  ASSERT_TRUE(ToGraphDef(symbol).SerializeToString(&bytes));
  tessera::GraphDef parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.version(), kGraphDefVersion);
  absl::StatusOr<Symbol> back = FromGraphDef(parsed);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->ListArguments(), symbol.ListArguments());
  EXPECT_EQ(back->ListOutputs(), symbol.ListOutputs());
  EXPECT_EQ(back->ListAuxiliaryStates(), symbol.ListAuxiliaryStates());
  EXPECT_EQ(back->ListAttrs(), symbol.ListAttrs());
  EXPECT_EQ(DescribeGraph(*back), DescribeGraph(symbol));
  EXPECT_EQ(SymbolToJson(*back), SymbolToJson(symbol));
}

TEST(GraphDefTest, TestFilesRoundTrip) {
  for (const char* name : {"mlp-symbol.json", "lenet-symbol.json", "resnet_block-symbol.json"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Symbol> symbol = LoadSymbolFile(TestDataPath(name));
    ASSERT_THAT(symbol, IsOk());
    ExpectGraphDefRoundTrip(*symbol);
  }
}

TEST(GraphDefTest, ComposedSymbolRoundTrips) {
  absl::StatusOr<Symbol> symbol = MakeComposedSymbol();
  ASSERT_THAT(symbol, IsOk());
  ExpectGraphDefRoundTrip(*symbol);
}

TEST(GraphDefTest, ListsNodesInOrderWithParamsAndAttrs) {
  absl::StatusOr<Symbol> symbol = MakeComposedSymbol();
  ASSERT_THAT(symbol, IsOk());
  const tessera::GraphDef def = ToGraphDef(*symbol);
  std::vector<std::string> names;
  for (const tessera::NodeDef& node : def.nodes()) names.push_back(node.name());
  EXPECT_THAT(names, ElementsAre("data", "slice", "fc_weight", "fc", "bn_gamma", "bn_beta",
                                 "bn_moving_mean", "bn_moving_var", "bn", "stop"));
  const tessera::NodeDef& data = def.nodes(0);
  EXPECT_EQ(data.op(), "");
  EXPECT_EQ(data.attrs().at("__lr_mult__"), "0.5");
  EXPECT_TRUE(data.params().empty());
  const tessera::NodeDef& fc = def.nodes(3);
  EXPECT_EQ(fc.op(), "FullyConnected");
  EXPECT_EQ(fc.params().at("num_hidden"), "5");
  EXPECT_EQ(fc.params().at("no_bias"), "true");
  EXPECT_EQ(fc.attrs().at("__ctx_group__"), "dev1");
  ASSERT_EQ(fc.inputs_size(), 2);
  EXPECT_EQ(fc.inputs(0).node(), 1u);  // slice, output 0
  EXPECT_EQ(fc.inputs(0).index(), 0u);
  // Heads: bn, stop, slice output 1.
  ASSERT_EQ(def.heads_size(), 3);
  EXPECT_EQ(def.heads(2).node(), 1u);
  EXPECT_EQ(def.heads(2).index(), 1u);
}

// data, w, b (nodes 0-2) and node 3, an `op` named fc1 taking `inputs`; head (3, 0).
tessera::GraphDef Graph(const std::string& op, const std::map<std::string, std::string>& params,
                        const std::vector<std::pair<uint32_t, uint32_t>>& inputs) {
  tessera::GraphDef def;
  for (const char* name : {"data", "w", "b"}) def.add_nodes()->set_name(name);
  tessera::NodeDef* node = def.add_nodes();
  node->set_name("fc1");
  node->set_op(op);
  for (const auto& [key, value] : params) (*node->mutable_params())[key] = value;
  for (const auto& [from, index] : inputs) {
    tessera::EntryRef* entry = node->add_inputs();
    entry->set_node(from);
    entry->set_index(index);
  }
  tessera::EntryRef* head = def.add_heads();
  head->set_node(3);
  return def;
}

const std::map<std::string, std::string> kHidden = {{"num_hidden", "4"}};
const std::vector<std::pair<uint32_t, uint32_t>> kInputs = {{0, 0}, {1, 0}, {2, 0}};

TEST(GraphDefTest, TheBaseGraphLoads) {
  absl::StatusOr<Symbol> symbol = FromGraphDef(Graph("FullyConnected", kHidden, kInputs));
  ASSERT_THAT(symbol, IsOk());
  EXPECT_THAT(symbol->ListArguments(), ElementsAre("data", "w", "b"));
}

TEST(GraphDefTest, UnknownOperator) {
  EXPECT_THAT(FromGraphDef(Graph("FullyConected", kHidden, kInputs)),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("'FullyConected'"))));
}

TEST(GraphDefTest, BadParameters) {
  EXPECT_THAT(FromGraphDef(Graph("FullyConnected", {{"num_hidden", "-2"}}, kInputs)),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1' (FullyConnected)"),
                                       HasSubstr("num_hidden"))));
  tessera::GraphDef def = Graph("FullyConnected", kHidden, kInputs);
  (*def.mutable_nodes(1)->mutable_params())["lr_mult"] = "2";
  EXPECT_THAT(FromGraphDef(def), StatusIs(kInvalid, AllOf(HasSubstr("node #1 'w' (variable)"),
                                                          HasSubstr("no parameters"))));
}

TEST(GraphDefTest, WrongNumberOfInputs) {
  EXPECT_THAT(FromGraphDef(Graph("FullyConnected", kHidden, {{0, 0}})),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"),
                                       HasSubstr("takes 3 inputs (data, weight, bias), got 1"))));
}

TEST(GraphDefTest, DanglingInputAndBadOutputIndex) {
  EXPECT_THAT(FromGraphDef(Graph("FullyConnected", kHidden, {{0, 0}, {1, 0}, {12, 0}})),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("node #12"),
                                       HasSubstr("dangling"))));
  EXPECT_THAT(
      FromGraphDef(Graph("FullyConnected", kHidden, {{0, 0}, {1, 3}, {2, 0}})),
      StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("output 3 of node #1 'w'"))));
}

TEST(GraphDefTest, Cycle) {
  EXPECT_THAT(FromGraphDef(Graph("FullyConnected", kHidden, {{3, 0}, {1, 0}, {2, 0}})),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("cycle"))));
}

TEST(GraphDefTest, HeadOutOfRangeAndNewerVersion) {
  tessera::GraphDef def = Graph("FullyConnected", kHidden, kInputs);
  def.mutable_heads(0)->set_node(4);
  EXPECT_THAT(FromGraphDef(def),
              StatusIs(kInvalid, AllOf(HasSubstr("head #0"), HasSubstr("node #4"))));
  def = Graph("FullyConnected", kHidden, kInputs);
  def.set_version(kGraphDefVersion + 1);
  EXPECT_THAT(FromGraphDef(def), StatusIs(kInvalid, HasSubstr("version 2")));
}

}  // namespace
}  // namespace tessera::graph

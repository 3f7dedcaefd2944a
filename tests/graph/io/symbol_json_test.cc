// MXNet symbol JSON: hand-written files in the 1.x ("attrs") and 0.8 ("param"/"attr")
// forms load with the arguments, outputs, auxiliary states, parameters and attributes MXNet
// would report, infer MXNet's shapes, and survive a round trip through our writer; files
// round-trip through disk with errors that name the file.
#include "graph/symbol_json.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/graph/io/io_test_util.h"

namespace tessera::graph {
namespace {

using ::tessera::graph::testing::DescribeGraph;
using ::tessera::graph::testing::ExpectJsonRoundTrip;
using ::tessera::graph::testing::FindNode;
using ::tessera::graph::testing::Load;
using ::tessera::graph::testing::MakeComposedSymbol;
using ::tessera::graph::testing::Named;
using ::tessera::graph::testing::TempPath;
using ::tessera::graph::testing::TestDataPath;
using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using Strings = std::vector<std::string>;

TEST(SymbolJsonTest, LoadsMxnet1xMlp) {
  const Symbol mlp = Load("mlp-symbol.json");
  EXPECT_EQ(mlp.ListArguments(), (Strings{"data", "fc1_weight", "fc1_bias", "fc2_weight",
                                          "fc2_bias", "fc3_weight", "fc3_bias", "softmax_label"}));
  EXPECT_THAT(mlp.ListOutputs(), ElementsAre("softmax_output"));
  EXPECT_THAT(mlp.ListAuxiliaryStates(), IsEmpty());
  const Node* fc2 = FindNode(mlp, "fc2");
  ASSERT_NE(fc2, nullptr);
  EXPECT_EQ(fc2->OpName(), "FullyConnected");
  EXPECT_EQ(fc2->op->GetParams().at("num_hidden"), "64");
  EXPECT_EQ(FindNode(mlp, "relu2")->op->GetParams().at("act_type"), "relu");

  absl::StatusOr<InferResult<Shape>> shapes = mlp.InferShape({{"data", Shape{32, 1, 28, 28}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_EQ(Named(mlp.ListArguments(), shapes->arguments),
            (std::map<std::string, Shape>{{"data", {32, 1, 28, 28}},
                                          {"fc1_weight", {128, 784}},
                                          {"fc1_bias", {128}},
                                          {"fc2_weight", {64, 128}},
                                          {"fc2_bias", {64}},
                                          {"fc3_weight", {10, 64}},
                                          {"fc3_bias", {10}},
                                          {"softmax_label", {32}}}));
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{32, 10}));
}

TEST(SymbolJsonTest, LoadsMxnet08LeNetWithParamAndBareAttr) {
  const Symbol lenet = Load("lenet-symbol.json");
  EXPECT_EQ(lenet.ListArguments(),
            (Strings{"data", "conv1_weight", "conv1_bias", "conv2_weight", "conv2_bias",
                     "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "softmax_label"}));
  EXPECT_THAT(lenet.ListOutputs(), ElementsAre("softmax_output"));
  EXPECT_THAT(lenet.ListAuxiliaryStates(), IsEmpty());
  const std::map<std::string, std::string> conv2 = FindNode(lenet, "conv2")->op->GetParams();
  EXPECT_EQ(conv2.at("kernel"), "(5,5)");
  EXPECT_EQ(conv2.at("num_filter"), "50");
  EXPECT_EQ(conv2.at("workspace"), "1024");
  EXPECT_EQ(FindNode(lenet, "pool1")->op->GetParams().at("stride"), "(2,2)");
  // 0.8 wrote attributes without underscores; they are attributes, not parameters.
  EXPECT_EQ(FindNode(lenet, "fc1_weight")->attrs,
            (Attrs{{"__lr_mult__", "2.0"}, {"__wd_mult__", "0.5"}}));
  EXPECT_EQ(FindNode(lenet, "fc1")->attrs, (Attrs{{"__ctx_group__", "dev1"}}));

  absl::StatusOr<InferResult<Shape>> shapes = lenet.InferShape({{"data", Shape{8, 1, 28, 28}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_EQ(Named(lenet.ListArguments(), shapes->arguments),
            (std::map<std::string, Shape>{{"data", {8, 1, 28, 28}},
                                          {"conv1_weight", {20, 1, 5, 5}},
                                          {"conv1_bias", {20}},
                                          {"conv2_weight", {50, 20, 5, 5}},
                                          {"conv2_bias", {50}},
                                          {"fc1_weight", {500, 800}},
                                          {"fc1_bias", {500}},
                                          {"fc2_weight", {10, 500}},
                                          {"fc2_bias", {10}},
                                          {"softmax_label", {8}}}));
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{8, 10}));
}

TEST(SymbolJsonTest, LoadsResNetBlockWithAuxStatesAndAttrs) {
  const Symbol block = Load("resnet_block-symbol.json");
  const std::string u = "stage1_unit1_";
  EXPECT_EQ(block.ListArguments(),
            (Strings{"data", u + "bn1_gamma", u + "bn1_beta", u + "conv1_weight", u + "bn2_gamma",
                     u + "bn2_beta", u + "conv2_weight", u + "sc_weight"}));
  EXPECT_EQ(block.ListAuxiliaryStates(), (Strings{u + "bn1_moving_mean", u + "bn1_moving_var",
                                                  u + "bn2_moving_mean", u + "bn2_moving_var"}));
  EXPECT_THAT(block.ListOutputs(), ElementsAre("_plus0_output"));
  const std::map<std::string, std::string> bn1 = FindNode(block, u + "bn1")->op->GetParams();
  EXPECT_EQ(bn1.at("fix_gamma"), "false");
  EXPECT_EQ(bn1.at("eps"), "2e-05");
  EXPECT_EQ(bn1.at("momentum"), "0.9");
  EXPECT_EQ(bn1.at("use_global_stats"), "false");
  EXPECT_EQ(FindNode(block, u + "conv1")->op->GetParams().at("no_bias"), "true");
  EXPECT_EQ(FindNode(block, u + "sc")->op->GetParams().at("cudnn_tune"), "limited_workspace");
  EXPECT_EQ(FindNode(block, u + "conv1_weight")->attrs,
            (Attrs{{"__lr_mult__", "1.0"}, {"__shape__", "(8, 3, 3, 3)"}}));
  EXPECT_EQ(FindNode(block, u + "bn1_moving_var")->attrs, (Attrs{{"__init__", "[\"one\", {}]"}}));

  absl::StatusOr<InferResult<Shape>> shapes = block.InferShape({{"data", Shape{2, 3, 8, 8}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_EQ(Named(block.ListArguments(), shapes->arguments),
            (std::map<std::string, Shape>{{"data", {2, 3, 8, 8}},
                                          {u + "bn1_gamma", {3}},
                                          {u + "bn1_beta", {3}},
                                          {u + "conv1_weight", {8, 3, 3, 3}},
                                          {u + "bn2_gamma", {8}},
                                          {u + "bn2_beta", {8}},
                                          {u + "conv2_weight", {8, 8, 3, 3}},
                                          {u + "sc_weight", {8, 3, 1, 1}}}));
  EXPECT_THAT(shapes->aux_states, ElementsAre(Shape{3}, Shape{3}, Shape{8}, Shape{8}));
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{2, 8, 8, 8}));
}

TEST(SymbolJsonTest, TestFilesRoundTrip) {
  for (const char* name : {"mlp-symbol.json", "lenet-symbol.json", "resnet_block-symbol.json"}) {
    SCOPED_TRACE(name);
    ExpectJsonRoundTrip(Load(name));
  }
}

// Parameters as Gluon 1.6 writes them when it exports: optional ones left unset as "None",
// layout, Dropout axes and cudnn_off, Embedding dtype and sparse_grad, BatchNorm axis, the
// newer act_types and softmax temperature. A CNN and a text classifier, one head each.
TEST(SymbolJsonTest, LoadsGluonExportedParameters) {
  const Symbol nets = Load("gluon_nets-symbol.json");
  EXPECT_THAT(nets.ListOutputs(), ElementsAre("softmax0_output", "log_softmax0_output"));
  const auto params = [&](const std::string& node) { return FindNode(nets, node)->op->GetParams(); };
  EXPECT_EQ(params("conv0_fwd").at("layout"), "NCHW");
  EXPECT_EQ(params("pool0_fwd").at("p_value"), "0");  // None: unset
  EXPECT_EQ(params("dropout1_fwd").at("axes"), "(1,)");
  EXPECT_EQ(params("embedding0_fwd").at("dtype"), "float32");
  EXPECT_EQ(params("softmax0").at("temperature"), "1");
  EXPECT_EQ(params("log_softmax0").at("temperature"), "2");
  EXPECT_EQ(params("gelu0_fwd").at("act_type"), "gelu");

  absl::StatusOr<InferResult<Shape>> shapes =
      nets.InferShape({{"data", Shape{2, 1, 8, 8}}, {"tokens", Shape{2, 5}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_EQ(shapes->outputs, (std::vector<Shape>{{2, 3}, {2, 3}}));
  const auto args = Named(nets.ListArguments(), shapes->arguments);
  EXPECT_EQ(args.at("dense0_weight"), (Shape{3, 64}));  // 4 channels x 4 x 4 after pooling
  EXPECT_EQ(args.at("dense1_weight"), (Shape{3, 40}));  // 5 tokens x 8
  ExpectJsonRoundTrip(nets);
}

TEST(SymbolJsonTest, ComposedSymbolRoundTrips) {
  absl::StatusOr<Symbol> symbol = MakeComposedSymbol();
  ASSERT_THAT(symbol, IsOk());
  EXPECT_THAT(symbol->ListOutputs(), ElementsAre("bn_output", "stop_output", "slice_output1"));
  ExpectJsonRoundTrip(*symbol);
  absl::StatusOr<Symbol> back = SymbolFromJson(SymbolToJson(*symbol));
  ASSERT_THAT(back, IsOk());
  EXPECT_THAT(back->ListOutputs(), ElementsAre("bn_output", "stop_output", "slice_output1"));
  EXPECT_EQ(back->ListArguments(), (Strings{"data", "fc_weight", "bn_gamma", "bn_beta"}));
  EXPECT_EQ(back->ListAuxiliaryStates(), (Strings{"bn_moving_mean", "bn_moving_var"}));
  absl::StatusOr<InferResult<Shape>> shapes = back->InferShape({});  // data from __shape__
  ASSERT_THAT(shapes, IsOk());
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{4, 5}, Shape{4, 2}, Shape{4, 2}));
}

// What we write has the structure MXNet itself writes for the same network: the same
// nodes, inputs (ignoring versions), arg_nodes, node_row_ptr and heads as the file.
TEST(SymbolJsonTest, WritesMxnetStructure) {
  std::ifstream in(TestDataPath("resnet_block-symbol.json"));
  const nlohmann::json original = nlohmann::json::parse(in);
  const nlohmann::json written =
      nlohmann::json::parse(SymbolToJson(Load("resnet_block-symbol.json")));
  const auto strip_versions = [](const nlohmann::json& entries) {
    std::vector<std::pair<int, int>> out;
    for (const auto& e : entries) out.emplace_back(e[0].get<int>(), e[1].get<int>());
    return out;
  };
  ASSERT_EQ(written["nodes"].size(), original["nodes"].size());
  for (size_t i = 0; i < written["nodes"].size(); ++i) {
    const nlohmann::json& w = written["nodes"][i];
    const nlohmann::json& o = original["nodes"][i];
    EXPECT_EQ(w["name"], o["name"]);
    EXPECT_EQ(w["op"], o["op"]);
    EXPECT_EQ(strip_versions(w["inputs"]), strip_versions(o["inputs"])) << o["name"];
    const nlohmann::json attrs = o.value("attrs", nlohmann::json::object());
    for (const auto& [key, value] : attrs.items()) {
      if (key.front() == '_') {
        EXPECT_EQ(w["attrs"][key], value) << o["name"] << " " << key;
      }
    }
  }
  EXPECT_EQ(written["arg_nodes"], original["arg_nodes"]);
  EXPECT_EQ(written["node_row_ptr"], original["node_row_ptr"]);
  EXPECT_EQ(strip_versions(written["heads"]), strip_versions(original["heads"]));
  EXPECT_EQ(written["attrs"], original["attrs"]);
  // Every value is a string, as MXNet's parameter parser expects.
  for (const auto& node : written["nodes"]) {
    const nlohmann::json attrs = node.value("attrs", nlohmann::json::object());
    for (const auto& [key, value] : attrs.items()) {
      EXPECT_TRUE(value.is_string()) << node["name"] << " " << key;
    }
  }
}

TEST(SymbolJsonTest, Mxnet09AttrHoldsParametersAndAttributes) {
  absl::StatusOr<Symbol> symbol = SymbolFromJson(R"({
    "nodes": [
      {"op": "null", "name": "x", "attr": {"__lr_mult__": "3"}, "inputs": []},
      {"op": "null", "name": "w", "attr": {"lr_mult": "0"}, "inputs": []},
      {"op": "FullyConnected", "name": "fc", "attr": {"num_hidden": "4", "no_bias": "True",
       "ctx_group": "dev2"}, "inputs": [[0, 0, 0], [1, 0, 0]]}],
    "arg_nodes": [0, 1], "heads": [[2, 0, 0]]})");
  ASSERT_THAT(symbol, IsOk());
  EXPECT_EQ(FindNode(*symbol, "fc")->op->GetParams().at("num_hidden"), "4");
  EXPECT_EQ(FindNode(*symbol, "fc")->attrs, (Attrs{{"__ctx_group__", "dev2"}}));
  EXPECT_EQ(FindNode(*symbol, "x")->attrs, (Attrs{{"__lr_mult__", "3"}}));
  EXPECT_EQ(FindNode(*symbol, "w")->attrs, (Attrs{{"__lr_mult__", "0"}}));
}

TEST(SymbolJsonTest, SaveAndLoadFile) {
  const Symbol mlp = Load("mlp-symbol.json");
  const std::string path = TempPath("saved-symbol.json");
  ASSERT_THAT(SaveSymbolFile(mlp, path), IsOk());
  absl::StatusOr<Symbol> back = LoadSymbolFile(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(DescribeGraph(*back), DescribeGraph(mlp));
}

TEST(SymbolJsonTest, FileErrorsNameTheFile) {
  const std::string missing = TempPath("no-such-symbol.json");
  EXPECT_THAT(LoadSymbolFile(missing), StatusIs(absl::StatusCode::kNotFound, HasSubstr(missing)));

  const std::string bad = TempPath("bad-symbol.json");
  std::ofstream(bad) << R"({"nodes": [], "heads": [[0, 0, 0]]})";
  EXPECT_THAT(LoadSymbolFile(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                            AllOf(StartsWith(bad), HasSubstr("head #0"))));

  EXPECT_THAT(SaveSymbolFile(Load("mlp-symbol.json"), TempPath("no/such/dir/x.json")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/dir/x.json")));
}

}  // namespace
}  // namespace tessera::graph

// Symbol files of every MXNet generation load as MXNet itself loads them:
//   0.8   "param" + "attr", two-element inputs, "backward_source_id", no "mxnet_version";
//         BatchNorm without its auxiliary-state inputs, attributes without underscores (also
//         per argument, "weight_lr_mult"), CamelCase operator names (_Plus, _MulScalar,
//         Softmax), Reshape's target_shape (mxnet08_save_000800.json is MXNet's own
//         tests/python/unittest/save_000800.json; mxnet08_legacy_ops.json is crafted)
//   0.9   "attr" holding parameters and "__attr__"s, [node, index, version] entries,
//         node_row_ptr, {"mxnet_version": ["int", 904]} (mxnet09_mlp_bn.json)
//   1.9   a Gluon HybridBlock.export: "hybridsequential0_..." names, every parameter Gluon
//         passes written as str() of its value, deferred shapes with 0s (mxnet19_gluon_export)
// Each one infers MXNet's shapes and survives our writer (MXNet 1.6's form) and reader.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/substitute.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "graph/graph_def.h"
#include "graph/symbol_json.h"
#include "gtest/gtest.h"
#include "tests/graph/io/io_test_util.h"

namespace tessera::graph {
namespace {

using ::tessera::graph::testing::DescribeGraph;
using ::tessera::graph::testing::ExpectJsonRoundTrip;
using ::tessera::graph::testing::FindNode;
using ::tessera::graph::testing::Load;
using ::tessera::graph::testing::Named;
using ::tessera::graph::testing::TestDataPath;
using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Strings = std::vector<std::string>;

Attrs AttrsOf(const Symbol& symbol, const std::string& node) {
  const Node* found = FindNode(symbol, node);
  EXPECT_NE(found, nullptr) << node;
  return found != nullptr ? found->attrs : Attrs{};
}

std::map<std::string, std::string> ParamsOf(const Symbol& symbol, const std::string& node) {
  const Node* found = FindNode(symbol, node);
  EXPECT_TRUE(found != nullptr && !found->is_variable()) << node;
  return found != nullptr && !found->is_variable() ? found->op->GetParams()
                                                   : std::map<std::string, std::string>{};
}

// What MXNet's test_load_000800 checks of this file (the attributes of the same network
// built in Python), and what MXNet's upgrade passes make of it.
TEST(MxnetGenerationsTest, Mxnet08SaveFileLoadsAsInMxnet) {
  const Symbol net = Load("mxnet08_save_000800.json");
  EXPECT_EQ(net.ListArguments(),
            (Strings{"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc3_weight",
                     "fc3_bias", "batchnorm0_gamma", "batchnorm0_beta", "softmax_label"}));
  // 0.8 did not write BatchNorm's auxiliary states: they are created as MXNet names them.
  EXPECT_EQ(net.ListAuxiliaryStates(),
            (Strings{"batchnorm0_moving_mean", "batchnorm0_moving_var"}));
  EXPECT_THAT(net.ListOutputs(), ElementsAre("softmax_output"));

  EXPECT_EQ(AttrsOf(net, "data"), (Attrs{{"__ctx_group__", "stage1"}, {"__lr_mult__", "0.2"}}));
  // fc1's "weight_lr_mult" is its weight's lr_mult; the variable's own copy of the key (0.8
  // gave variables their consumer's attributes) stays an attribute under its own name.
  EXPECT_EQ(AttrsOf(net, "fc1"), (Attrs{{"__ctx_group__", "stage1"}, {"__wd_mult__", "0.3"}}));
  EXPECT_EQ(AttrsOf(net, "fc1_weight"), (Attrs{{"__ctx_group__", "stage1"},
                                               {"__lr_mult__", "1.2"},
                                               {"__weight_lr_mult__", "1.2"},
                                               {"__wd_mult__", "0.3"}}));
  EXPECT_EQ(AttrsOf(net, "fc2_weight"),
            (Attrs{{"__ctx_group__", "stage2"}, {"__lr_mult__", "0.01"}}));
  EXPECT_EQ(AttrsOf(net, "fc2"), (Attrs{{"__ctx_group__", "stage2"}, {"__lr_mult__", "0.01"}}));
  // The created states carry their BatchNorm's attributes (its ctx_group), as in MXNet.
  EXPECT_EQ(AttrsOf(net, "batchnorm0_moving_mean"), (Attrs{{"__ctx_group__", "stage2"}}));
  EXPECT_EQ(AttrsOf(net, "batchnorm0_moving_var"), (Attrs{{"__ctx_group__", "stage2"}}));
  EXPECT_EQ(ParamsOf(net, "batchnorm0").at("fix_gamma"), "true");
  EXPECT_EQ(ParamsOf(net, "softmax").at("out_grad"), "false");

  absl::StatusOr<InferResult<Shape>> shapes = net.InferShape({{"data", Shape{1, 200}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_EQ(Named(net.ListArguments(), shapes->arguments).at("fc1_weight"), (Shape{128, 200}));
  EXPECT_THAT(shapes->aux_states, ElementsAre(Shape{10}, Shape{10}));
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{1, 10}));

  // Written back in the 1.x form, the states are nodes of the file and load once.
  const nlohmann::json written = nlohmann::json::parse(SymbolToJson(net));
  EXPECT_EQ(written["nodes"].size(), 19u);  // the 17 of the file and the 2 states
  ExpectJsonRoundTrip(net);
}

// MXNet 0.8's other operator names and parameters, in a residual block written by hand in
// 0.8's form.
TEST(MxnetGenerationsTest, Mxnet08LegacyNamesAndParameters) {
  const Symbol net = Load("mxnet08_legacy_ops.json");
  EXPECT_EQ(net.ListArguments(), (Strings{"data", "conv1_weight", "conv1_bias", "bn1_gamma",
                                          "bn1_beta", "fc1_weight", "fc1_bias", "softmax_label"}));
  EXPECT_EQ(net.ListAuxiliaryStates(), (Strings{"bn1_moving_mean", "bn1_moving_var"}));
  EXPECT_THAT(net.ListOutputs(), ElementsAre("softmax_output"));
  // CamelCase and deprecated names are MXNet's aliases of the operators.
  EXPECT_EQ(FindNode(net, "_plus0")->OpName(), "elemwise_add");
  EXPECT_EQ(FindNode(net, "_mulscalar0")->OpName(), "_mul_scalar");
  EXPECT_EQ(ParamsOf(net, "_mulscalar0").at("scalar"), "0.5");
  EXPECT_EQ(FindNode(net, "softmax")->OpName(), "SoftmaxOutput");
  EXPECT_EQ(ParamsOf(net, "conv1").at("cudnn_tune"), "off");
  // Per-argument attributes of conv1 land on its variables.
  EXPECT_EQ(AttrsOf(net, "conv1"), (Attrs{{"__ctx_group__", "dev1"}}));
  EXPECT_EQ(AttrsOf(net, "conv1_weight"), (Attrs{{"__lr_mult__", "0.5"}}));
  EXPECT_EQ(AttrsOf(net, "conv1_bias"), (Attrs{{"__wd_mult__", "0"}}));
  EXPECT_EQ(AttrsOf(net, "fc1_weight"), (Attrs{{"__lr_mult__", "2"}, {"__wd_mult__", "0.5"}}));
  EXPECT_EQ(AttrsOf(net, "bn1_moving_var"), (Attrs{{"__ctx_group__", "dev1"}}));

  absl::StatusOr<InferResult<Shape>> shapes = net.InferShape({{"data", Shape{2, 4, 8, 8}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_EQ(Named(net.ListArguments(), shapes->arguments).at("fc1_weight"), (Shape{6, 64}));
  EXPECT_THAT(shapes->aux_states, ElementsAre(Shape{4}, Shape{4}));
  // fc1 (2, 6) -> target_shape (0,2,3) -> (2, 2, 3) -> keep_highest (1,6) -> (2, 6).
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{2, 6}));
  absl::StatusOr<Symbol> reshape1 = net.GetInternals().GetOutput("reshape1_output");
  ASSERT_THAT(reshape1, IsOk());
  absl::StatusOr<InferResult<Shape>> inner = reshape1->InferShape({{"data", Shape{2, 4, 8, 8}}});
  ASSERT_THAT(inner, IsOk());
  EXPECT_THAT(inner->outputs, ElementsAre(Shape{2, 2, 3}));
  ExpectJsonRoundTrip(net);
}

// A BatchNorm given only its arguments: created states in a file before 0.9 (as MXNet's
// UpgradeJSON_000800_000900), an error in a 1.x file, which always lists them.
TEST(MxnetGenerationsTest, ImplicitAuxiliaryStatesOnlyBefore09) {
  const std::string graph = R"({"nodes": [
      {"op": "null", "name": "x", "inputs": []},
      {"op": "null", "name": "bn_gamma", "inputs": []},
      {"op": "null", "name": "bn_beta", "inputs": []},
      {"op": "BatchNorm", "name": "bn", "attrs": {"eps": "1e-5"},
       "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}],
    "arg_nodes": [0, 1, 2], "heads": [[3, 0, 0]]$0})";
  absl::StatusOr<Symbol> unversioned = SymbolFromJson(absl::Substitute(graph, ""));
  ASSERT_THAT(unversioned, IsOk());
  EXPECT_EQ(unversioned->ListAuxiliaryStates(), (Strings{"bn_moving_mean", "bn_moving_var"}));
  absl::StatusOr<Symbol> v08 =
      SymbolFromJson(absl::Substitute(graph, R"(, "attrs": {"mxnet_version": ["int", 800]})"));
  ASSERT_THAT(v08, IsOk());
  EXPECT_EQ(DescribeGraph(*v08), DescribeGraph(*unversioned));

  EXPECT_THAT(
      SymbolFromJson(absl::Substitute(graph, R"(, "attrs": {"mxnet_version": ["int", 10600]})")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("node #3 'bn' (BatchNorm)"), HasSubstr("got 3"))));
  EXPECT_THAT(SymbolFromJson(absl::Substitute(graph, R"(, "attrs": {"mxnet_version": "1.9"})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mxnet_version")));
}

// The nnvm form of 0.9-0.12; what we write keeps its structure (node order, arg_nodes with
// the states, node_row_ptr) and changes only the version.
TEST(MxnetGenerationsTest, Mxnet09AttrFileLoadsAndKeepsItsStructure) {
  const Symbol net = Load("mxnet09_mlp_bn.json");
  EXPECT_EQ(net.ListArguments(), (Strings{"data", "fc1_weight", "fc1_bias", "bn1_gamma", "bn1_beta",
                                          "fc2_weight", "fc2_bias", "softmax_label"}));
  EXPECT_EQ(net.ListAuxiliaryStates(), (Strings{"bn1_moving_mean", "bn1_moving_var"}));
  EXPECT_EQ(FindNode(net, "_plusscalar0")->OpName(), "_plus_scalar");
  EXPECT_EQ(ParamsOf(net, "bn1").at("eps"), "2e-05");
  EXPECT_EQ(ParamsOf(net, "softmax").at("normalization"), "batch");
  EXPECT_EQ(AttrsOf(net, "relu1"), (Attrs{{"__ctx_group__", "dev2"}}));
  EXPECT_EQ(AttrsOf(net, "fc1_bias"), (Attrs{{"__wd_mult__", "0.0"}}));
  absl::StatusOr<InferResult<Shape>> shapes = net.InferShape({{"data", Shape{3, 10}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{3, 4}));

  std::ifstream in(TestDataPath("mxnet09_mlp_bn.json"));
  const nlohmann::json original = nlohmann::json::parse(in);
  const nlohmann::json written = nlohmann::json::parse(SymbolToJson(net));
  ASSERT_EQ(written["nodes"].size(), original["nodes"].size());
  for (size_t i = 0; i < written["nodes"].size(); ++i) {
    EXPECT_EQ(written["nodes"][i]["name"], original["nodes"][i]["name"]);
  }
  EXPECT_EQ(written["arg_nodes"], original["arg_nodes"]);
  EXPECT_EQ(written["node_row_ptr"], original["node_row_ptr"]);
  EXPECT_EQ(written["heads"], original["heads"]);
  EXPECT_EQ(written["attrs"]["mxnet_version"], nlohmann::json::parse(R"(["int", 10600])"));
  ExpectJsonRoundTrip(net);
}

TEST(MxnetGenerationsTest, Gluon19ExportLoads) {
  const Symbol net = Load("mxnet19_gluon_export.json");
  const std::string p = "hybridsequential0_";
  EXPECT_EQ(
      net.ListArguments(),
      (Strings{"data", p + "conv0_weight", p + "conv0_bias", p + "batchnorm0_gamma",
               p + "batchnorm0_beta", p + "conv1_weight", p + "conv1_bias", p + "prelu0_alpha",
               p + "dense0_weight", p + "dense0_bias", p + "dense1_weight"}));
  EXPECT_EQ(net.ListAuxiliaryStates(),
            (Strings{p + "batchnorm0_running_mean", p + "batchnorm0_running_var"}));
  EXPECT_THAT(net.ListOutputs(), ElementsAre(p + "dense1_fwd_output"));
  // Parameters as Gluon wrote them, read as MXNet reads them.
  EXPECT_EQ(ParamsOf(net, p + "dense0_fwd").at("flatten"), "true");
  EXPECT_EQ(ParamsOf(net, p + "dense1_fwd").at("flatten"), "false");
  EXPECT_EQ(ParamsOf(net, p + "dense1_fwd").at("no_bias"), "true");
  EXPECT_EQ(ParamsOf(net, p + "batchnorm0_fwd").at("eps"), "1e-05");
  EXPECT_EQ(ParamsOf(net, p + "batchnorm0_fwd").at("fix_gamma"), "false");
  EXPECT_EQ(ParamsOf(net, p + "conv1_fwd").at("adj"), "(0,0)");
  EXPECT_EQ(ParamsOf(net, p + "pool1_fwd").at("count_include_pad"), "true");
  EXPECT_EQ(ParamsOf(net, p + "pool2_fwd").at("global_pool"), "true");
  EXPECT_EQ(ParamsOf(net, p + "dropout0_fwd").at("axes"), "()");
  EXPECT_EQ(ParamsOf(net, p + "elu0_leakyrelu0").at("act_type"), "elu");
  EXPECT_EQ(AttrsOf(net, p + "conv0_bias").at("__init__"), "zeros");

  // Deferred shapes ("(8, 0, 3, 3)") are completed by inference.
  absl::StatusOr<InferResult<Shape>> shapes = net.InferShape({{"data", Shape{2, 3, 16, 16}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_TRUE(shapes->complete);
  const auto args = Named(net.ListArguments(), shapes->arguments);
  EXPECT_EQ(args.at(p + "conv0_weight"), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(args.at(p + "conv1_weight"), (Shape{8, 4, 2, 2}));
  EXPECT_EQ(args.at(p + "prelu0_alpha"), (Shape{1}));  // one slope for every channel
  EXPECT_EQ(args.at(p + "dense0_weight"), (Shape{16, 4}));
  EXPECT_EQ(args.at(p + "dense1_weight"), (Shape{10, 16}));
  EXPECT_THAT(shapes->aux_states, ElementsAre(Shape{8}, Shape{8}));
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{2, 10}));
  ExpectJsonRoundTrip(net);
}

// Every parameter of these operators as a 1.9 symbol writes it when all are given (a
// quantization-calibrated BatchNorm has its ranges), through the JSON loader.
TEST(MxnetGenerationsTest, EveryParameterMxnet19WritesLoads) {
  absl::StatusOr<Symbol> net = SymbolFromJson(R"J({"nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "null", "name": "conv_weight", "inputs": []},
      {"op": "Convolution", "name": "conv", "attrs": {"cudnn_off": "False",
       "cudnn_tune": "None", "dilate": "()", "kernel": "(3, 3)", "layout": "None",
       "no_bias": "True", "num_filter": "4", "num_group": "1", "pad": "(1, 1)",
       "stride": "()", "workspace": "1024"}, "inputs": [[0, 0, 0], [1, 0, 0]]},
      {"op": "null", "name": "bn_gamma", "inputs": []},
      {"op": "null", "name": "bn_beta", "inputs": []},
      {"op": "null", "name": "bn_moving_mean", "inputs": []},
      {"op": "null", "name": "bn_moving_var", "inputs": []},
      {"op": "BatchNorm", "name": "bn", "attrs": {"axis": "1", "cudnn_off": "False",
       "eps": "0.001", "fix_gamma": "True", "max_calib_range": "3.75",
       "min_calib_range": "-2.5", "momentum": "0.9", "output_mean_var": "False",
       "use_global_stats": "False"},
       "inputs": [[2, 0, 0], [3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 0]]},
      {"op": "Pooling", "name": "pool", "attrs": {"count_include_pad": "None",
       "cudnn_off": "False", "global_pool": "True", "kernel": "()", "layout": "None",
       "p_value": "None", "pad": "()", "pool_type": "avg", "pooling_convention": "valid",
       "stride": "()"}, "inputs": [[7, 0, 0]]},
      {"op": "Reshape", "name": "flat", "attrs": {"keep_highest": "False",
       "reverse": "False", "shape": "(0, -1)", "target_shape": "()"}, "inputs": [[8, 0, 0]]},
      {"op": "softmax", "name": "prob", "attrs": {"axis": "-1", "dtype": "None",
       "temperature": "None", "use_length": "False"}, "inputs": [[9, 0, 0]]},
      {"op": "sum", "name": "total", "attrs": {"axis": "()", "exclude": "False",
       "keepdims": "True"}, "inputs": [[10, 0, 0]]},
      {"op": "_mul_scalar", "name": "half", "attrs": {"is_int": "False", "scalar": "0.5"},
       "inputs": [[11, 0, 0]]}],
    "arg_nodes": [0, 1, 3, 4, 5, 6], "heads": [[12, 0, 0]],
    "attrs": {"mxnet_version": ["int", 10900]}})J");
  ASSERT_THAT(net, IsOk());
  EXPECT_EQ(ParamsOf(*net, "bn").at("min_calib_range"), "-2.5");
  EXPECT_EQ(ParamsOf(*net, "conv").at("layout"), "None");
  EXPECT_EQ(ParamsOf(*net, "half").at("is_int"), "false");
  absl::StatusOr<InferResult<Shape>> shapes = net->InferShape({{"data", Shape{2, 3, 5, 5}}});
  ASSERT_THAT(shapes, IsOk());
  EXPECT_THAT(shapes->outputs, ElementsAre(Shape{1, 1}));
  ExpectJsonRoundTrip(*net);
}

// The same graphs through the GraphDef protobuf, which shares the loader's checks.
TEST(MxnetGenerationsTest, FilesRoundTripThroughGraphDef) {
  for (const char* name : {"mxnet08_save_000800.json", "mxnet08_legacy_ops.json",
                           "mxnet09_mlp_bn.json", "mxnet19_gluon_export.json"}) {
    SCOPED_TRACE(name);
    const Symbol net = Load(name);
    absl::StatusOr<Symbol> back = FromGraphDef(ToGraphDef(net));
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(DescribeGraph(*back), DescribeGraph(net));
  }
}

}  // namespace
}  // namespace tessera::graph

// MXNet symbol JSON that must not load: every error has the right code and names the node
// (by position and name) or says where the text breaks. Also what must load although it
// looks odd: forward references without a cycle, repeated names.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "graph/symbol_json.h"
#include "gtest/gtest.h"

namespace tessera::graph {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// data, fc1_weight, fc1_bias (nodes 0-2), then `more` (node 3 on); heads `heads`; then
// `root_attrs` (e.g. kVersion1x) in the root object.
std::string Graph(const std::string& more, const std::string& heads = "[[3, 0, 0]]",
                  const std::string& root_attrs = "") {
  return absl::Substitute(R"({"nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "null", "name": "fc1_weight", "inputs": []},
      {"op": "null", "name": "fc1_bias", "inputs": []},
      $0],
    "arg_nodes": [0, 1, 2], "heads": $1$2})",
                          more, heads, root_attrs);
}

constexpr char kVersion1x[] = R"(, "attrs": {"mxnet_version": ["int", 10600]})";

// Node 3: `op` named fc1 with `attrs` and `inputs`.
std::string Node3(const std::string& op, const std::string& attrs, const std::string& inputs) {
  return absl::Substitute(R"({"op": "$0", "name": "fc1", "attrs": $1, "inputs": $2})", op, attrs,
                          inputs);
}

std::string Fc(const std::string& attrs, const std::string& inputs) {
  return Node3("FullyConnected", attrs, inputs);
}

constexpr char kHidden[] = R"({"num_hidden": "4"})";
constexpr char kInputs[] = "[[0, 0, 0], [1, 0, 0], [2, 0, 0]]";

TEST(SymbolJsonErrorsTest, TheBaseGraphLoads) {
  absl::StatusOr<Symbol> symbol = SymbolFromJson(Graph(Fc(kHidden, kInputs)));
  ASSERT_THAT(symbol, IsOk());
  EXPECT_THAT(symbol->ListArguments(), ElementsAre("data", "fc1_weight", "fc1_bias"));
}

TEST(SymbolJsonErrorsTest, MalformedJsonSaysWhere) {
  EXPECT_THAT(SymbolFromJson(R"({"nodes": [}")"),
              StatusIs(kInvalid, AllOf(HasSubstr("malformed"), HasSubstr("byte 12"))));
  EXPECT_THAT(SymbolFromJson(""), StatusIs(kInvalid, HasSubstr("malformed")));
  EXPECT_THAT(SymbolFromJson("[1, 2]"), StatusIs(kInvalid, HasSubstr("not an object")));
  // A number beyond a double's range is the JSON library's out_of_range, not a parse error
  // (it took the process down: fuzz/regressions/symbol_json/number_overflow.json).
  EXPECT_THAT(SymbolFromJson(R"({"nodes": [], "heads": [], "attrs": 6145E23323333})"),
              StatusIs(kInvalid, AllOf(HasSubstr("malformed"), HasSubstr("number overflow"))));
}

// One small request must not take the process down: text nested deeper than any symbol
// file is refused where it gets too deep (100,000 levels overflowed the stack before).
TEST(SymbolJsonErrorsTest, DeepNestingIsRefusedWhereItStarts) {
  constexpr int kDeep = 100000;
  const std::string deep = Graph(Fc(kHidden, std::string(kDeep, '[') + std::string(kDeep, ']')));
  EXPECT_THAT(SymbolFromJson(deep),
              StatusIs(kInvalid, AllOf(HasSubstr("nests deeper than 64 levels"),
                                       HasSubstr(absl::StrCat("byte ", deep.find("[[[") + 61)))));
  // Brackets inside strings (escaped quotes too) are not nesting.
  const std::string brackets_in_a_name = std::string(R"(\"x)") + std::string(200, '[');
  absl::StatusOr<Symbol> symbol = SymbolFromJson(absl::Substitute(
      R"({"nodes": [{"op": "null", "name": "$0", "inputs": []}], "arg_nodes": [0],
          "heads": [[0, 0, 0]]})",
      brackets_in_a_name));
  ASSERT_THAT(symbol, IsOk());
  EXPECT_THAT(symbol->ListArguments(), ElementsAre("\"x" + std::string(200, '[')));
}

TEST(SymbolJsonErrorsTest, MissingNodesOrHeads) {
  EXPECT_THAT(SymbolFromJson(R"({"heads": []})"), StatusIs(kInvalid, HasSubstr("'nodes'")));
  EXPECT_THAT(SymbolFromJson(R"({"nodes": {}, "heads": []})"),
              StatusIs(kInvalid, HasSubstr("'nodes'")));
  EXPECT_THAT(SymbolFromJson(R"({"nodes": []})"), StatusIs(kInvalid, HasSubstr("'heads'")));
}

TEST(SymbolJsonErrorsTest, MalformedNodes) {
  EXPECT_THAT(SymbolFromJson(Graph(R"({"op": "null", "inputs": []})")),
              StatusIs(kInvalid, HasSubstr("node #3: missing string 'name'")));
  EXPECT_THAT(SymbolFromJson(Graph(R"({"name": "fc1", "inputs": []})")),
              StatusIs(kInvalid, HasSubstr("node #3 'fc1': missing string 'op'")));
  EXPECT_THAT(SymbolFromJson(Graph(R"({"op": "FullyConnected", "name": "fc1"})")),
              StatusIs(kInvalid, HasSubstr("node #3 'fc1': missing 'inputs'")));
  EXPECT_THAT(
      SymbolFromJson(Graph(Fc(kHidden, "[[0, 0, 0], [1], [2, 0, 0]]"))),
      StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1': input #1"), HasSubstr("[node, index]"))));
  EXPECT_THAT(SymbolFromJson(Graph(Fc(R"({"num_hidden": {"a": 1}})", kInputs))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("num_hidden"))));
}

TEST(SymbolJsonErrorsTest, UnknownOperator) {
  EXPECT_THAT(SymbolFromJson(Graph(Node3("FullyConected", kHidden, kInputs))),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("'FullyConected'"))));
}

TEST(SymbolJsonErrorsTest, BadParameters) {
  EXPECT_THAT(SymbolFromJson(Graph(Fc(R"({"num_hidden": "ten"})", kInputs))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1' (FullyConnected)"),
                                       HasSubstr("num_hidden"), HasSubstr("'ten'"))));
  EXPECT_THAT(SymbolFromJson(Graph(Fc("{}", kInputs))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"),
                                       HasSubstr("required parameter 'num_hidden'"))));
}

// MXNet parameters that change the result and that we do not implement are refused, not
// silently dropped; the ones that only pick a backend are accepted.
TEST(SymbolJsonErrorsTest, MeaningfulMxnetParametersWeLackAreRefused) {
  const std::string conv = Node3(
      "Convolution", R"J({"kernel": "(3, 3)", "num_filter": "4", "layout": "NHWC"})J", kInputs);
  EXPECT_THAT(SymbolFromJson(Graph(conv)),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1' (Convolution)"),
                                       HasSubstr("layout 'NHWC' is not supported"))));
  const std::string tuned = Node3("Convolution", R"J({"kernel": "(3, 3)", "num_filter": "4",
      "workspace": "512", "cudnn_tune": "fastest", "cudnn_off": "True"})J",
                                  kInputs);
  EXPECT_THAT(SymbolFromJson(Graph(tuned)), IsOk());
}

TEST(SymbolJsonErrorsTest, WrongNumberOfInputs) {
  EXPECT_THAT(SymbolFromJson(Graph(Fc(kHidden, "[[0, 0, 0], [1, 0, 0]]"))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1' (FullyConnected)"),
                                       HasSubstr("takes 3 inputs (data, weight, bias), got 2"))));
  // BatchNorm's auxiliary states are inputs too (a file older than 0.9, without
  // mxnet_version, gets them created: mxnet_generations_test).
  EXPECT_THAT(SymbolFromJson(Graph(Node3("BatchNorm", "{}", kInputs), "[[3, 0, 0]]", kVersion1x)),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1' (BatchNorm)"),
                                       HasSubstr("(data, gamma, beta, moving_mean, moving_var)"))));
  EXPECT_THAT(SymbolFromJson(Graph(Node3("null", "{}", "[[0, 0, 0]]"))),
              StatusIs(kInvalid,
                       AllOf(HasSubstr("node #3 'fc1' (variable)"), HasSubstr("takes no inputs"))));
}

TEST(SymbolJsonErrorsTest, DanglingInput) {
  EXPECT_THAT(SymbolFromJson(Graph(Fc(kHidden, "[[0, 0, 0], [7, 0, 0], [2, 0, 0]]"))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("input #1 (weight)"),
                                       HasSubstr("node #7"), HasSubstr("dangling"))));
  EXPECT_THAT(SymbolFromJson(Graph(Fc(kHidden, "[[-1, 0, 0], [1, 0, 0], [2, 0, 0]]"))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("node #-1"))));
}

TEST(SymbolJsonErrorsTest, OutputIndexBeyondTheInputsOutputs) {
  EXPECT_THAT(
      SymbolFromJson(Graph(Fc(kHidden, "[[0, 1, 0], [1, 0, 0], [2, 0, 0]]"))),
      StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"),
                               HasSubstr("output 1 of node #0 'data', which has 1 output"))));
}

TEST(SymbolJsonErrorsTest, SelfCycle) {
  EXPECT_THAT(SymbolFromJson(Graph(Fc(kHidden, "[[3, 0, 0], [1, 0, 0], [2, 0, 0]]"))),
              StatusIs(kInvalid, AllOf(HasSubstr("node #3 'fc1'"), HasSubstr("cycle"))));
}

TEST(SymbolJsonErrorsTest, CycleThroughALaterNode) {
  // fc1 takes act (node 4) as data, act takes fc1.
  const std::string nodes = Fc(kHidden, "[[4, 0, 0], [1, 0, 0], [2, 0, 0]]") +
                            R"(, {"op": "Activation", "name": "act", "attrs": {"act_type": "relu"},
            "inputs": [[3, 0, 0]]})";
  EXPECT_THAT(SymbolFromJson(Graph(nodes, "[[4, 0, 0]]")),
              StatusIs(kInvalid, AllOf(HasSubstr("cycle"), HasSubstr("node #3 'fc1'"),
                                       HasSubstr("node #4 'act'"))));
}

TEST(SymbolJsonErrorsTest, ForwardReferenceWithoutCycleLoads) {
  // act (node 3) takes fc1, which comes after it.
  const std::string nodes =
      R"({"op": "Activation", "name": "act", "attrs": {"act_type": "relu"},
          "inputs": [[4, 0, 0]]}, )" +
      Fc(kHidden, kInputs);
  absl::StatusOr<Symbol> symbol = SymbolFromJson(Graph(nodes, "[[3, 0, 0]]"));
  ASSERT_THAT(symbol, IsOk());
  EXPECT_THAT(symbol->ListArguments(), ElementsAre("data", "fc1_weight", "fc1_bias"));
  EXPECT_THAT(symbol->ListOutputs(), ElementsAre("act_output"));
}

TEST(SymbolJsonErrorsTest, HeadOutOfRange) {
  EXPECT_THAT(SymbolFromJson(Graph(Fc(kHidden, kInputs), "[[9, 0, 0]]")),
              StatusIs(kInvalid, AllOf(HasSubstr("head #0"), HasSubstr("node #9"))));
  EXPECT_THAT(
      SymbolFromJson(Graph(Fc(kHidden, kInputs), "[[3, 0, 0], [3, 2, 0]]")),
      StatusIs(kInvalid, AllOf(HasSubstr("head #1"),
                               HasSubstr("output 2 of node #3 'fc1', which has 1 output"))));
  EXPECT_THAT(SymbolFromJson(Graph(Fc(kHidden, kInputs), "[3]")),
              StatusIs(kInvalid, HasSubstr("head #0")));
}

TEST(SymbolJsonErrorsTest, RepeatedNamesAreAllowed) {
  absl::StatusOr<Symbol> symbol = SymbolFromJson(R"({"nodes": [
      {"op": "null", "name": "x", "inputs": []},
      {"op": "null", "name": "x", "inputs": []},
      {"op": "elemwise_add", "name": "sum", "inputs": [[0, 0, 0], [1, 0, 0]]}],
    "arg_nodes": [0, 1], "heads": [[2, 0, 0]]})");
  ASSERT_THAT(symbol, IsOk());
  EXPECT_THAT(symbol->ListArguments(), ElementsAre("x", "x"));
}

}  // namespace
}  // namespace tessera::graph

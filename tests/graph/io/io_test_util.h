// Helpers shared by the symbol JSON and GraphDef tests: finding the MXNet test files,
// describing a graph as comparable text, a JSON round trip, and a symbol composed in C++.
#ifndef TESSERA_TESTS_GRAPH_IO_IO_TEST_UTIL_H_
#define TESSERA_TESTS_GRAPH_IO_IO_TEST_UTIL_H_

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "graph/indexed_graph.h"
#include "graph/symbol.h"
#include "graph/symbol_json.h"
#include "gtest/gtest.h"

namespace tessera::graph::testing {

// tests/graph/io/testdata/<name> in the test's runfiles (Bazel runs tests from the
// workspace's runfiles folder, so the relative path is the fallback).
inline std::string TestDataPath(const std::string& name) {
  const std::string relative = absl::StrCat("tests/graph/io/testdata/", name);
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return relative;
  return absl::StrCat(srcdir, "/", workspace, "/", relative);
}

// A symbol file of testdata/, loaded; a failure is a test failure (and an empty symbol).
inline Symbol Load(const std::string& name) {
  absl::StatusOr<Symbol> symbol = LoadSymbolFile(TestDataPath(name));
  EXPECT_THAT(symbol, ::tessera::testing::IsOk());
  return symbol.ok() ? *symbol : Symbol();
}

// {names[i]: shapes[i]}, for comparing inferred shapes by name.
inline std::map<std::string, Shape> Named(const std::vector<std::string>& names,
                                          const std::vector<Shape>& shapes) {
  std::map<std::string, Shape> out;
  for (size_t i = 0; i < names.size() && i < shapes.size(); ++i) out[names[i]] = shapes[i];
  return out;
}

// A scratch file path under TEST_TMPDIR (or /tmp outside Bazel).
inline std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
}

// One line per node in IndexedGraph order ("#3 fc1 FullyConnected no_bias=false ...
// <- 0 1 2", inputs as entry ids), then the heads: equal descriptions mean equal graphs,
// names, parameters, attributes and outputs.
inline std::vector<std::string> DescribeGraph(const Symbol& symbol) {
  const IndexedGraph graph(symbol.outputs());
  std::vector<std::string> lines;
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    std::string line = absl::StrCat("#", id, " ", node.name, " ", node.OpName());
    if (!node.is_variable()) {
      for (const auto& [key, value] : node.op->GetParams())
        absl::StrAppend(&line, " ", key, "=", value);
    }
    for (const auto& [key, value] : node.attrs) absl::StrAppend(&line, " ", key, "=", value);
    absl::StrAppend(&line, " <-");
    for (uint32_t entry : graph.inputs(id)) absl::StrAppend(&line, " ", entry);
    lines.push_back(line);
  }
  std::string heads = "heads:";
  for (uint32_t entry : graph.output_entries()) absl::StrAppend(&heads, " ", entry);
  lines.push_back(heads);
  return lines;
}

// Writes, reads back, writes again: the same graph and the same text.
inline void ExpectJsonRoundTrip(const Symbol& symbol) {
  const std::string json = SymbolToJson(symbol);
  absl::StatusOr<Symbol> back = SymbolFromJson(json);
  ASSERT_THAT(back, ::tessera::testing::IsOk()) << json;
  EXPECT_EQ(back->ListArguments(), symbol.ListArguments());
  EXPECT_EQ(back->ListOutputs(), symbol.ListOutputs());
  EXPECT_EQ(back->ListAuxiliaryStates(), symbol.ListAuxiliaryStates());
  EXPECT_EQ(back->ListAttrs(), symbol.ListAttrs());
  EXPECT_EQ(DescribeGraph(*back), DescribeGraph(symbol));
  EXPECT_EQ(SymbolToJson(*back), json);
}

// The node named `name` (the first, in IndexedGraph order); null when there is none.
inline const Node* FindNode(const Symbol& symbol, const std::string& name) {
  const IndexedGraph graph(symbol.outputs());
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    if (graph.node(id).name == name) return &graph.node(id);
  }
  return nullptr;
}

// data (4, 6) cut in three along axis 1; piece 0 -> FullyConnected -> BatchNorm, piece 2 ->
// BlockGrad, piece 1 as is: Group(bn, stop, piece 1). Outputs bn_output, stop_output,
// slice_output1; arguments data, fc_weight, bn_gamma, bn_beta; aux bn_moving_mean/var.
inline absl::StatusOr<Symbol> MakeComposedSymbol() {
  const Symbol data = Symbol::Variable("data", {{"lr_mult", "0.5"}, {"__shape__", "(4,6)"}});
  ASSIGN_OR_RETURN(const Symbol parts,
                   Symbol::Create("SliceChannel", {{"num_outputs", "3"}}, {data}, "slice"));
  ASSIGN_OR_RETURN(const Symbol first, parts[0]);
  ASSIGN_OR_RETURN(const Symbol second, parts[1]);
  ASSIGN_OR_RETURN(const Symbol third, parts[2]);
  ASSIGN_OR_RETURN(const Symbol fc,
                   Symbol::Create("FullyConnected", {{"num_hidden", "5"}, {"no_bias", "true"}},
                                  {first}, "fc", {{"ctx_group", "dev1"}}));
  ASSIGN_OR_RETURN(const Symbol bn,
                   Symbol::Create("BatchNorm", {{"fix_gamma", "false"}}, {{"data", fc}}, "bn"));
  ASSIGN_OR_RETURN(const Symbol stop, Symbol::Create("BlockGrad", {}, {third}, "stop"));
  return Symbol::Group({bn, stop, second});
}

}  // namespace tessera::graph::testing

#endif  // TESSERA_TESTS_GRAPH_IO_IO_TEST_UTIL_H_

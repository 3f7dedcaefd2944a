// NodeList: a symbol as a flat list of nodes that refer to each other by position, the
// shape both serialized forms share (MXNet's symbol JSON, the GraphDef protobuf). The
// format readers fill a NodeList and call ToSymbol, which holds all the validation, so both
// formats accept and reject the same graphs with the same messages.
//
// Internal to //graph (symbol_json, graph_def). Plain values; no shared state.
#ifndef TESSERA_GRAPH_NODE_LIST_H_
#define TESSERA_GRAPH_NODE_LIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/node.h"
#include "graph/symbol.h"
#include "ops/param.h"

namespace tessera::graph {

struct NodeList {
  // Output `index` of nodes[node]. Signed and wide so that whatever a file says (negative,
  // huge) reaches ToSymbol and is reported there, not wrapped on the way.
  struct Entry {
    int64_t node = 0;
    int64_t index = 0;
  };
  struct Item {
    std::string name;
    std::string op;  // empty for a variable
    ops::KwArgs params;
    Attrs attrs;  // "__name__" keys
    std::vector<Entry> inputs;
  };
  std::vector<Item> nodes;
  std::vector<Entry> heads;
};

// The nodes of `symbol` in IndexedGraph order (so argument order survives a round trip),
// with every operator parameter (GetParams) and attribute.
NodeList ToNodeList(const Symbol& symbol);

// Builds the symbol after checking, for every node: the operator exists (NOT_FOUND) and
// takes the parameters (the operator's error, prefixed); a variable has no inputs or
// parameters; the input count equals arguments + auxiliary states; each input names an
// existing node and one of its outputs; no cycle (inputs may refer to later nodes as long
// as they form none). Then that the heads exist. Errors other than NOT_FOUND are
// INVALID_ARGUMENT and start with "node #<position> '<name>'".
absl::StatusOr<Symbol> ToSymbol(const NodeList& list);

// "node #3 'fc1'": how every error names a node.
std::string NodeLabel(int64_t position, const std::string& name);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_NODE_LIST_H_

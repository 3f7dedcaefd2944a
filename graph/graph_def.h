// The GraphDef protobuf (proto/graph.proto) to and from Symbols: the binary, schema-checked
// sibling of the MXNet symbol JSON (graph/symbol_json.h), for RPCs and checkpoints.
//
// Both go through one NodeList (graph/node_list.h), so FromGraphDef accepts and rejects the
// same graphs as SymbolFromJson, with the same messages: NOT_FOUND for an unknown operator,
// INVALID_ARGUMENT naming the node ("node #3 'fc1' (FullyConnected): ...") for bad
// parameters, a wrong input count, a dangling input, a cycle, or a bad head.
//
// Stateless functions; safe from any thread (while no one calls SetAttr on the symbol).
#ifndef TESSERA_GRAPH_GRAPH_DEF_H_
#define TESSERA_GRAPH_GRAPH_DEF_H_

#include "absl/status/statusor.h"
#include "graph/symbol.h"
#include "proto/graph.pb.h"

namespace tessera::graph {

// The newest GraphDef.version this build writes and reads.
inline constexpr uint32_t kGraphDefVersion = 1;

// Nodes in IndexedGraph order with every operator parameter (GetParams) and attribute.
tessera::GraphDef ToGraphDef(const Symbol& symbol);
// Also INVALID_ARGUMENT for a version newer than kGraphDefVersion.
absl::StatusOr<Symbol> FromGraphDef(const tessera::GraphDef& graph_def);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_GRAPH_DEF_H_

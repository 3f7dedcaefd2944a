// Shape and type inference over an IndexedGraph: each operator's InferShape/InferType,
// run over the nodes in topological order until nothing changes, so that what one node
// learns about a shared input reaches the others.
#ifndef TESSERA_GRAPH_INFER_H_
#define TESSERA_GRAPH_INFER_H_

#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "graph/indexed_graph.h"

namespace tessera::graph {

// `shapes` holds one shape per entry (empty = unknown) and is completed as far as the
// operators can. INVALID_ARGUMENT naming the node when a known shape contradicts it.
absl::Status InferShapes(const IndexedGraph& graph, std::vector<Shape>* shapes);
// The same for types (DType::kUnknown = unknown).
absl::Status InferTypes(const IndexedGraph& graph, std::vector<DType>* types);

// The "__shape__" / "__dtype__" attribute of a variable node, parsed; nullopt-like empty
// shape / kUnknown when absent. Errors name the node and the attribute text.
absl::StatusOr<Shape> ShapeAttr(const Node& node);
absl::StatusOr<DType> DTypeAttr(const Node& node);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_INFER_H_

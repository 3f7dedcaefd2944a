// BuildExecGraph: the gradient pass (and device placement) that turns a symbol's
// IndexedGraph into the ExecGraph the executor runs.
//
// Placement: an operator runs on the context its "__ctx_group__" attribute maps to, else
// the default one; a value read on another device than it lives on is copied once per
// device (kCopy). Backward nodes run where their forward node ran.
//
// Gradients follow MXNet's static graph: each operator's Backward computes the gradients
// of its arguments from what DeclareBackwardDependency lists; contributions to one value
// from several consumers are summed (ElementWiseSum); BlockGrad stops the flow; a value
// that needs no gradient (no path to an argument with a non-null grad_req) gets none, and
// an operator none of whose inputs needs one runs no Backward.
#ifndef TESSERA_GRAPH_GRADIENT_H_
#define TESSERA_GRAPH_GRADIENT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/exec_graph.h"
#include "graph/indexed_graph.h"

namespace tessera::graph {

struct ExecGraphOptions {
  Context default_ctx = Context::CPU();
  std::map<std::string, Context> group2ctx;
  // Where the bound arrays live, per argument / auxiliary state (IndexedGraph order).
  std::vector<Context> argument_ctx, aux_ctx;
  // Per argument; all kNullOp (or empty) builds the forward graph only. kWriteInplace is
  // treated as kWriteTo.
  std::vector<OpReqType> grad_req;
};

// `shapes` and `types` are the complete per-entry results of inference on `graph`.
// INVALID_ARGUMENT naming the node when an auxiliary state lives on another device than
// its operator runs on (updates to a copy would be lost).
absl::StatusOr<ExecGraph> BuildExecGraph(const IndexedGraph& graph, const std::vector<Shape>& shapes,
                                         const std::vector<DType>& types,
                                         const ExecGraphOptions& options);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_GRADIENT_H_

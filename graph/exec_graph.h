// ExecGraph: what the executor runs - the forward graph, the copies between devices and,
// when gradients are wanted, the backward graph - as one list of nodes in an order that is
// topological, with every node output an "entry" numbered densely. The memory planner and
// the executor work on it; BuildExecGraph (gradient.h) makes it.
#ifndef TESSERA_GRAPH_EXEC_GRAPH_H_
#define TESSERA_GRAPH_EXEC_GRAPH_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "ops/operator.h"

namespace tessera::graph {

inline constexpr uint32_t kNoEntry = std::numeric_limits<uint32_t>::max();

enum class ExecNodeKind {
  kVariable,  // an argument or auxiliary state: its entry is the bound array
  kHeadGrad,  // the gradient of one symbol output, given to Backward
  kForward,   // an operator's Forward
  kBackward,  // an operator's Backward, computing the gradients of its arguments
  kGradSum,   // the sum of several gradient contributions to one entry (ElementWiseSum)
  kZeros,     // a zero gradient (an output whose gradient nothing produced)
  kCopy,      // a copy of an entry to another device
};

struct ExecNode {
  ExecNodeKind kind;
  std::string name;  // for errors and profiles: "fc1", "fc1_backward", "fc1_weight_grad_sum"
  Context ctx;
  // kForward/kBackward: the operator; kGradSum: an ElementWiseSum.
  std::shared_ptr<const ops::OperatorProperty> op;
  // kVariable/kForward: the node id in the symbol's IndexedGraph; kBackward: its forward
  // node's; kHeadGrad: the symbol output index.
  uint32_t source = kNoEntry;
  // Entries read. kForward: the arguments; kBackward: the union of the three lists below.
  std::vector<uint32_t> inputs;
  // kForward: the auxiliary-state entries, which Forward may update.
  std::vector<uint32_t> aux;
  // kBackward: the entries for Backward's out_grad / in_data / out_data slots, kNoEntry
  // where DeclareBackwardDependency did not ask for one.
  std::vector<uint32_t> out_grad, in_data, out_data;
  // kBackward: the forward node's exec id (for its aux states and to share its Operator).
  uint32_t forward_exec_id = kNoEntry;
  uint32_t first_output = 0;
  uint32_t num_outputs = 1;
};

struct ExecEntry {
  uint32_t node;   // the exec node writing it
  uint32_t index;  // which of its outputs
  Shape shape;
  DType dtype = DType::kUnknown;
  Context ctx;
  // How the producer writes it: kNullOp when nothing reads it, kAddTo for a gradient
  // accumulated into a bound array; the memory planner turns kWriteTo into kWriteInplace.
  OpReqType req = OpReqType::kWriteTo;
};

struct ExecGraph {
  std::vector<ExecNode> nodes;
  std::vector<ExecEntry> entries;
  // The symbol's outputs.
  std::vector<uint32_t> outputs;
  // Per argument (ListArguments order): its variable entry, and the entry holding its
  // gradient (kNoEntry when its grad_req is null). Gradient entries are bound to the
  // caller's arrays.
  std::vector<uint32_t> argument_entries, gradient_entries;
  std::vector<uint32_t> aux_entries;  // ListAuxiliaryStates order
  std::vector<uint32_t> head_grad_entries;  // per output, kNoEntry when not needed
  // Per entry: whether it lives in a caller-bound array (variables, head gradients,
  // argument gradients) rather than in planned storage.
  std::vector<bool> external;
  // Nodes [0, num_forward_nodes) are the forward pass (with its copies); the rest backward.
  uint32_t num_forward_nodes = 0;

  uint32_t Entry(uint32_t node, uint32_t index) const { return nodes[node].first_output + index; }
};

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_EXEC_GRAPH_H_

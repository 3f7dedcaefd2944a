// The nodes symbols are made of. A Node is a variable (no operator) or one application of
// an operator to the outputs of other nodes. Nodes are shared by every Symbol that reaches
// them (shared_ptr), so composing a symbol never copies the graph below it.
#ifndef TESSERA_GRAPH_NODE_H_
#define TESSERA_GRAPH_NODE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/operator.h"

namespace tessera::graph {

struct Node;

// Output `index` of `node`.
struct NodeEntry {
  std::shared_ptr<Node> node;
  uint32_t index = 0;
};

// Node attributes, keys in MXNet's "__name__" form (e.g. "__lr_mult__", "__shape__",
// "__ctx_group__"). Operator parameters are not attributes: they live in the property.
using Attrs = std::map<std::string, std::string>;

struct Node {
  std::string name;
  // Null for a variable. Immutable once the node exists (shared between threads).
  std::shared_ptr<const ops::OperatorProperty> op;
  // The operator's arguments, then its auxiliary states.
  std::vector<NodeEntry> inputs;
  Attrs attrs;

  bool is_variable() const { return op == nullptr; }
  int num_outputs() const { return is_variable() ? 1 : op->NumOutputs(); }
  int num_visible_outputs() const { return is_variable() ? 1 : op->NumVisibleOutputs(); }
  int num_arguments() const {
    return is_variable() ? 0 : static_cast<int>(op->ListArguments().size());
  }
  // The name of output `index` as MXNet lists it: "fc1_output", or a variable's own name.
  std::string OutputName(uint32_t index) const;
  // The operator's registered name, or "null" for a variable (as the symbol JSON says).
  std::string OpName() const;
};

// "lr_mult" -> "__lr_mult__"; keys already in that form are returned unchanged.
std::string AttrKey(const std::string& key);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_NODE_H_

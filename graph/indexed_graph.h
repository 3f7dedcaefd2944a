// IndexedGraph: a symbol's nodes numbered in topological order, with every node output
// (an "entry") numbered too, so passes work on dense vectors instead of pointers.
//
// Nodes come in depth-first post-order from the outputs, inputs in order, exactly as MXNet
// (NNVM's DFSVisit) numbers them; that order defines ListArguments. Entry ids are
// node_row_ptr[node] + output index, as in the symbol JSON's "node_row_ptr".
#ifndef TESSERA_GRAPH_INDEXED_GRAPH_H_
#define TESSERA_GRAPH_INDEXED_GRAPH_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "graph/node.h"

namespace tessera::graph {

class IndexedGraph {
 public:
  struct Entry {
    uint32_t node_id;
    uint32_t index;
  };

  explicit IndexedGraph(const std::vector<NodeEntry>& outputs);

  size_t num_nodes() const { return nodes_.size(); }
  size_t num_entries() const { return node_row_ptr_.back(); }
  const Node& node(uint32_t id) const { return *nodes_[id]; }
  const std::shared_ptr<Node>& node_ptr(uint32_t id) const { return nodes_[id]; }
  uint32_t node_id(const Node* node) const { return ids_.at(node); }
  uint32_t entry_id(uint32_t node_id, uint32_t index) const {
    return node_row_ptr_[node_id] + index;
  }
  uint32_t entry_id(const NodeEntry& e) const { return entry_id(node_id(e.node.get()), e.index); }
  // The input entries of node `id` (arguments, then auxiliary states).
  const std::vector<uint32_t>& inputs(uint32_t id) const { return inputs_[id]; }
  const std::vector<Entry>& outputs() const { return outputs_; }
  std::vector<uint32_t> output_entries() const;
  const std::vector<uint32_t>& node_row_ptr() const { return node_row_ptr_; }

  // Variable node ids in order, split by how operators use them (a variable is an
  // auxiliary state when any operator takes it in an auxiliary position).
  const std::vector<uint32_t>& argument_nodes() const { return argument_nodes_; }
  const std::vector<uint32_t>& aux_nodes() const { return aux_nodes_; }

 private:
  std::vector<std::shared_ptr<Node>> nodes_;
  absl::flat_hash_map<const Node*, uint32_t> ids_;
  std::vector<std::vector<uint32_t>> inputs_;
  std::vector<uint32_t> node_row_ptr_;
  std::vector<Entry> outputs_;
  std::vector<uint32_t> argument_nodes_, aux_nodes_;
};

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_INDEXED_GRAPH_H_

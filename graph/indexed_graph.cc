#include "graph/indexed_graph.h"

#include <utility>

#include "absl/container/flat_hash_set.h"

namespace tessera::graph {

IndexedGraph::IndexedGraph(const std::vector<NodeEntry>& outputs) {
  // Iterative post-order DFS (deep networks would overflow a recursive one). A symbol
  // built from shared_ptrs cannot hold a cycle: loaders reject cycles before linking.
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack;
  absl::flat_hash_set<const Node*> on_stack;
  for (const NodeEntry& head : outputs) {
    if (ids_.contains(head.node.get())) continue;
    stack.emplace_back(head.node, 0);
    on_stack.insert(head.node.get());
    while (!stack.empty()) {
      Node* node = stack.back().first.get();
      size_t& next = stack.back().second;
      if (next < node->inputs.size()) {
        const std::shared_ptr<Node>& child = node->inputs[next++].node;
        if (!ids_.contains(child.get()) && on_stack.insert(child.get()).second) {
          stack.emplace_back(child, 0);
        }
        continue;
      }
      ids_[node] = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(std::move(stack.back().first));
      on_stack.erase(node);
      stack.pop_back();
    }
  }
  node_row_ptr_.push_back(0);
  inputs_.resize(nodes_.size());
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    node_row_ptr_.push_back(node_row_ptr_.back() + nodes_[id]->num_outputs());
  }
  std::vector<bool> is_aux(nodes_.size(), false);
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = *nodes_[id];
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const uint32_t child = ids_.at(n.inputs[i].node.get());
      inputs_[id].push_back(entry_id(child, n.inputs[i].index));
      if (static_cast<int>(i) >= n.num_arguments()) is_aux[child] = true;
    }
  }
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    if (!nodes_[id]->is_variable()) continue;
    (is_aux[id] ? aux_nodes_ : argument_nodes_).push_back(id);
  }
  for (const NodeEntry& head : outputs) outputs_.push_back({ids_.at(head.node.get()), head.index});
}

std::vector<uint32_t> IndexedGraph::output_entries() const {
  std::vector<uint32_t> out;
  for (const Entry& e : outputs_) out.push_back(entry_id(e.node_id, e.index));
  return out;
}

}  // namespace tessera::graph

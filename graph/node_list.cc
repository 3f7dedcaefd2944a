#include "graph/node_list.h"

#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/indexed_graph.h"
#include "ops/registry.h"

namespace tessera::graph {
namespace {

// "node #3 'fc1' (FullyConnected): <what>".
absl::Status NodeError(const NodeList& list, int64_t i, absl::string_view what) {
  const NodeList::Item& item = list.nodes[i];
  return absl::InvalidArgumentError(absl::StrCat(
      NodeLabel(i, item.name), " (", item.op.empty() ? "variable" : item.op, "): ", what));
}

std::string Plural(int64_t n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

// Checks that `entry` names an existing node and one of its outputs; `what` says whose
// entry it is ("input #2", "head #0").
absl::Status CheckEntry(const std::vector<std::shared_ptr<Node>>& nodes,
                        const NodeList::Entry& entry, const std::string& what,
                        const std::function<absl::Status(absl::string_view)>& error) {
  const int64_t n = static_cast<int64_t>(nodes.size());
  if (entry.node < 0 || entry.node >= n) {
    return error(absl::StrCat(what, " refers to node #", entry.node, ", but there are ",
                              Plural(n, "node"), " (a dangling reference)"));
  }
  const Node& target = *nodes[entry.node];
  if (entry.index < 0 || entry.index >= target.num_outputs()) {
    return error(absl::StrCat(what, " refers to output ", entry.index, " of ",
                              NodeLabel(entry.node, target.name), ", which has ",
                              Plural(target.num_outputs(), "output")));
  }
  return absl::OkStatus();
}

// Depth-first search over the inputs of every node; a node met again while it is still on
// the path closes a cycle, reported at that node with the path around it.
absl::Status CheckAcyclic(const NodeList& list) {
  enum class Mark : uint8_t { kUnseen, kOnPath, kDone };
  std::vector<Mark> mark(list.nodes.size(), Mark::kUnseen);
  std::vector<std::pair<int64_t, size_t>> path;  // node, next input to follow
  for (int64_t root = 0; root < static_cast<int64_t>(list.nodes.size()); ++root) {
    if (mark[root] != Mark::kUnseen) continue;
    mark[root] = Mark::kOnPath;
    path.emplace_back(root, 0);
    while (!path.empty()) {
      const int64_t node = path.back().first;
      const std::vector<NodeList::Entry>& inputs = list.nodes[node].inputs;
      if (path.back().second == inputs.size()) {
        mark[node] = Mark::kDone;
        path.pop_back();
        continue;
      }
      const int64_t child = inputs[path.back().second++].node;
      if (mark[child] == Mark::kUnseen) {
        mark[child] = Mark::kOnPath;
        path.emplace_back(child, 0);
      } else if (mark[child] == Mark::kOnPath) {
        std::vector<std::string> cycle;
        size_t start = 0;
        while (path[start].first != child) ++start;
        for (size_t k = start; k < path.size(); ++k) {
          cycle.push_back(NodeLabel(path[k].first, list.nodes[path[k].first].name));
        }
        cycle.push_back(cycle.front());
        return NodeError(list, child,
                         absl::StrCat("its inputs form a cycle: ", absl::StrJoin(cycle, " <- "),
                                      " (each node takes the next one as input)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string NodeLabel(int64_t position, const std::string& name) {
  return absl::StrCat("node #", position, " '", name, "'");
}

NodeList ToNodeList(const Symbol& symbol) {
  const IndexedGraph graph(symbol.outputs());
  NodeList list;
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    NodeList::Item item;
    item.name = node.name;
    item.attrs = node.attrs;
    if (!node.is_variable()) {
      item.op = node.op->TypeString();
      for (auto& [key, value] : node.op->GetParams()) item.params.emplace_back(key, value);
    }
    for (const NodeEntry& input : node.inputs) {
      item.inputs.push_back({graph.node_id(input.node.get()), input.index});
    }
    list.nodes.push_back(std::move(item));
  }
  for (const IndexedGraph::Entry& head : graph.outputs()) {
    list.heads.push_back({head.node_id, head.index});
  }
  return list;
}

absl::StatusOr<Symbol> ToSymbol(const NodeList& list) {
  const int64_t n = static_cast<int64_t>(list.nodes.size());
  std::vector<std::shared_ptr<Node>> nodes(n);

  // Each node on its own: operator and parameters.
  for (int64_t i = 0; i < n; ++i) {
    const NodeList::Item& item = list.nodes[i];
    auto node = std::make_shared<Node>();
    node->name = item.name;
    node->attrs = item.attrs;
    if (item.op.empty()) {
      if (!item.params.empty()) {
        return NodeError(
            list, i,
            absl::StrCat("a variable has no parameters, got '", item.params.front().first, "'"));
      }
    } else {
      if (ops::OpRegistry::Global().Find(item.op) == nullptr) {
        return absl::NotFoundError(absl::StrCat(NodeLabel(i, item.name), ": unknown operator '",
                                                item.op, "' (`tessera ops` lists them)"));
      }
      absl::StatusOr<std::unique_ptr<ops::OperatorProperty>> prop =
          ops::OpRegistry::Global().Create(item.op, item.params);
      if (!prop.ok()) return NodeError(list, i, prop.status().message());
      node->op = *std::move(prop);
    }
    nodes[i] = std::move(node);
  }

  // Inputs: as many as the operator takes, each an existing output.
  for (int64_t i = 0; i < n; ++i) {
    const NodeList::Item& item = list.nodes[i];
    const Node& node = *nodes[i];
    std::vector<std::string> slots;
    if (!node.is_variable()) {
      slots = node.op->ListArguments();
      for (const std::string& aux : node.op->ListAuxiliaryStates()) slots.push_back(aux);
    }
    if (item.inputs.size() != slots.size()) {
      return NodeError(
          list, i,
          node.is_variable()
              ? absl::StrCat("a variable takes no inputs, got ", item.inputs.size())
              : absl::StrCat("takes ", Plural(slots.size(), "input"), " (",
                             absl::StrJoin(slots, ", "), "), got ", item.inputs.size()));
    }
    const auto error = [&](absl::string_view what) { return NodeError(list, i, what); };
    for (size_t k = 0; k < item.inputs.size(); ++k) {
      RETURN_IF_ERROR(CheckEntry(nodes, item.inputs[k],
                                 absl::StrCat("input #", k, " (", slots[k], ")"), error));
    }
  }
  // Linking a cycle would leak it (shared_ptrs) and hang every traversal: refuse it first.
  RETURN_IF_ERROR(CheckAcyclic(list));
  const auto head_error = [](absl::string_view what) { return absl::InvalidArgumentError(what); };
  for (size_t k = 0; k < list.heads.size(); ++k) {
    RETURN_IF_ERROR(CheckEntry(nodes, list.heads[k], absl::StrCat("head #", k), head_error));
  }

  for (int64_t i = 0; i < n; ++i) {
    for (const NodeList::Entry& input : list.nodes[i].inputs) {
      nodes[i]->inputs.push_back({nodes[input.node], static_cast<uint32_t>(input.index)});
    }
  }
  std::vector<NodeEntry> outputs;
  for (const NodeList::Entry& head : list.heads) {
    outputs.push_back({nodes[head.node], static_cast<uint32_t>(head.index)});
  }
  return Symbol(std::move(outputs));
}

}  // namespace tessera::graph

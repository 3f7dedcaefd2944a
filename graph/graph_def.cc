#include "graph/graph_def.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/node_list.h"

namespace tessera::graph {
namespace {

void SetEntry(const NodeList::Entry& from, tessera::EntryRef* to) {
  to->set_node(static_cast<uint32_t>(from.node));
  to->set_index(static_cast<uint32_t>(from.index));
}

NodeList::Entry GetEntry(const tessera::EntryRef& from) {
  return NodeList::Entry{from.node(), from.index()};
}

}  // namespace

tessera::GraphDef ToGraphDef(const Symbol& symbol) {
  tessera::GraphDef graph_def;
  graph_def.set_version(kGraphDefVersion);
  const NodeList list = ToNodeList(symbol);
  for (const NodeList::Item& item : list.nodes) {
    tessera::NodeDef* node = graph_def.add_nodes();
    node->set_name(item.name);
    node->set_op(item.op);
    for (const auto& [key, value] : item.params) (*node->mutable_params())[key] = value;
    for (const auto& [key, value] : item.attrs) (*node->mutable_attrs())[key] = value;
    for (const NodeList::Entry& input : item.inputs) SetEntry(input, node->add_inputs());
  }
  for (const NodeList::Entry& head : list.heads) SetEntry(head, graph_def.add_heads());
  return graph_def;
}

absl::StatusOr<Symbol> FromGraphDef(const tessera::GraphDef& graph_def) {
  if (graph_def.version() > kGraphDefVersion) {
    return absl::InvalidArgumentError(absl::StrCat("GraphDef version ", graph_def.version(),
                                                   " is newer than this build reads (",
                                                   kGraphDefVersion, ")"));
  }
  NodeList list;
  for (const tessera::NodeDef& node : graph_def.nodes()) {
    NodeList::Item item;
    item.name = node.name();
    item.op = node.op();
    // Protobuf maps iterate in no fixed order; sorting makes the first error reported, and
    // so the message, the same on every run.
    const std::map<std::string, std::string> params(node.params().begin(), node.params().end());
    item.params.assign(params.begin(), params.end());
    for (const auto& [key, value] : node.attrs()) item.attrs[AttrKey(key)] = value;
    for (const tessera::EntryRef& input : node.inputs()) item.inputs.push_back(GetEntry(input));
    list.nodes.push_back(std::move(item));
  }
  for (const tessera::EntryRef& head : graph_def.heads()) list.heads.push_back(GetEntry(head));
  return ToSymbol(list);
}

}  // namespace tessera::graph

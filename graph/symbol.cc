#include "graph/symbol.h"

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "graph/indexed_graph.h"
#include "graph/infer.h"
#include "ops/registry.h"

namespace tessera::graph {
namespace {

// MXNet's NameManager: "<op in lower case><counter>", one counter per prefix.
std::string AutoName(absl::string_view op) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* counters ABSL_GUARDED_BY(mu) = new absl::flat_hash_map<std::string, int>();
  const std::string prefix = absl::AsciiStrToLower(op);
  absl::MutexLock lock(&mu);
  return absl::StrCat(prefix, (*counters)[prefix]++);
}

Attrs NormalizeAttrs(const Attrs& attrs) {
  Attrs out;
  for (const auto& [key, value] : attrs) out[AttrKey(key)] = value;
  return out;
}

}  // namespace

SymbolInput::SymbolInput(const Symbol& symbol) : symbol(&symbol) {}
SymbolInput::SymbolInput(std::string name, const Symbol& symbol)
    : name(std::move(name)), symbol(&symbol) {}

Symbol Symbol::Variable(const std::string& name, const Attrs& attrs) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->attrs = NormalizeAttrs(attrs);
  return Symbol({NodeEntry{std::move(node), 0}});
}

absl::StatusOr<Symbol> Symbol::Create(absl::string_view op, const ops::KwArgs& params,
                                      const std::vector<SymbolInput>& inputs,
                                      const std::string& name, const Attrs& attrs) {
  auto node = std::make_shared<Node>();
  node->name = name.empty() ? AutoName(op) : name;
  node->attrs = NormalizeAttrs(attrs);
  const auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node->name, "' (", op, "): ", what));
  };
  if (ops::OpRegistry::Global().Find(op) == nullptr) {
    return absl::NotFoundError(absl::StrCat("node '", node->name, "': unknown operator '", op,
                                            "' (`tessera ops` lists them)"));
  }
  absl::StatusOr<std::unique_ptr<ops::OperatorProperty>> prop =
      ops::OpRegistry::Global().Create(op, params);
  if (!prop.ok()) return error(prop.status().message());
  node->op = std::move(*prop);

  std::vector<std::string> slots = node->op->ListArguments();
  for (const std::string& aux : node->op->ListAuxiliaryStates()) slots.push_back(aux);
  std::vector<std::optional<NodeEntry>> given(slots.size());
  size_t positional = 0;
  for (const SymbolInput& input : inputs) {
    const std::string label = input.name.empty() ? absl::StrCat("#", positional) : input.name;
    if (input.symbol->NumOutputs() != 1) {
      return error(absl::StrCat("input '", label, "' has ", input.symbol->NumOutputs(),
                                " outputs (", absl::StrJoin(input.symbol->ListOutputs(), ", "),
                                "); pick one with operator[]"));
    }
    size_t slot = positional;
    if (input.name.empty()) {
      if (positional >= slots.size()) {
        return error(absl::StrCat("got ", inputs.size(), " inputs, but takes ", slots.size(),
                                  " (", absl::StrJoin(slots, ", "), ")"));
      }
      ++positional;
    } else {
      auto it = std::find(slots.begin(), slots.end(), input.name);
      if (it == slots.end()) {
        return error(absl::StrCat("no input named '", input.name, "' (takes ",
                                  absl::StrJoin(slots, ", "), ")"));
      }
      slot = it - slots.begin();
    }
    if (given[slot].has_value()) return error(absl::StrCat("input '", slots[slot], "' given twice"));
    given[slot] = input.symbol->outputs()[0];
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!given[i].has_value()) {
      given[i] = Variable(absl::StrCat(node->name, "_", slots[i])).outputs()[0];
    }
    node->inputs.push_back(*given[i]);
  }
  std::vector<NodeEntry> outputs;
  for (int i = 0; i < node->num_visible_outputs(); ++i) outputs.push_back({node, static_cast<uint32_t>(i)});
  return Symbol(std::move(outputs));
}

Symbol Symbol::Group(const std::vector<Symbol>& symbols) {
  std::vector<NodeEntry> outputs;
  for (const Symbol& s : symbols) outputs.insert(outputs.end(), s.outputs_.begin(), s.outputs_.end());
  return Symbol(std::move(outputs));
}

absl::StatusOr<Symbol> Symbol::operator[](size_t index) const {
  if (index >= outputs_.size()) {
    return absl::OutOfRangeError(absl::StrCat("output index ", index, " out of range: the symbol has ",
                                              outputs_.size(), " outputs (",
                                              absl::StrJoin(ListOutputs(), ", "), ")"));
  }
  return Symbol({outputs_[index]});
}

absl::StatusOr<Symbol> Symbol::GetOutput(absl::string_view name) const {
  const std::vector<std::string> names = ListOutputs();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return Symbol({outputs_[i]});
  }
  return absl::NotFoundError(absl::StrCat("no output named '", name, "' (outputs: ",
                                          absl::StrJoin(names, ", "), ")"));
}

Symbol Symbol::GetInternals() const {
  IndexedGraph graph(outputs_);
  std::vector<NodeEntry> outputs;
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    for (int i = 0; i < graph.node(id).num_visible_outputs(); ++i) {
      outputs.push_back({graph.node_ptr(id), static_cast<uint32_t>(i)});
    }
  }
  return Symbol(std::move(outputs));
}

std::vector<std::string> Symbol::ListArguments() const {
  IndexedGraph graph(outputs_);
  std::vector<std::string> names;
  for (uint32_t id : graph.argument_nodes()) names.push_back(graph.node(id).name);
  return names;
}

std::vector<std::string> Symbol::ListOutputs() const {
  std::vector<std::string> names;
  for (const NodeEntry& e : outputs_) names.push_back(e.node->OutputName(e.index));
  return names;
}

std::vector<std::string> Symbol::ListAuxiliaryStates() const {
  IndexedGraph graph(outputs_);
  std::vector<std::string> names;
  for (uint32_t id : graph.aux_nodes()) names.push_back(graph.node(id).name);
  return names;
}

std::optional<std::string> Symbol::GetAttr(const std::string& key) const {
  if (outputs_.empty()) return std::nullopt;
  const Attrs& attrs = outputs_[0].node->attrs;
  auto it = attrs.find(AttrKey(key));
  if (it == attrs.end()) return std::nullopt;
  return it->second;
}

void Symbol::SetAttr(const std::string& key, const std::string& value) {
  for (const NodeEntry& e : outputs_) e.node->attrs[AttrKey(key)] = value;
}

std::map<std::string, Attrs> Symbol::ListAttrs() const {
  IndexedGraph graph(outputs_);
  std::map<std::string, Attrs> out;
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    if (!graph.node(id).attrs.empty()) out[graph.node(id).name] = graph.node(id).attrs;
  }
  return out;
}

namespace {

// Seeds per-entry values from `known` (by argument or aux name) and node attributes, runs
// inference, and reads the results back out in the three list orders.
template <typename T, typename AttrFn, typename InferFn>
absl::StatusOr<InferResult<T>> RunInference(const std::vector<NodeEntry>& heads,
                                            const std::map<std::string, T>& known, T unknown,
                                            AttrFn attr, InferFn infer) {
  IndexedGraph graph(heads);
  std::vector<T> values(graph.num_entries(), unknown);
  absl::flat_hash_set<std::string> used;
  std::vector<std::string> names;
  for (const std::vector<uint32_t>* list : {&graph.argument_nodes(), &graph.aux_nodes()}) {
    for (uint32_t id : *list) {
      const Node& node = graph.node(id);
      names.push_back(node.name);
      ASSIGN_OR_RETURN(values[graph.entry_id(id, 0)], attr(node));
      if (auto it = known.find(node.name); it != known.end()) {
        values[graph.entry_id(id, 0)] = it->second;
        used.insert(node.name);
      }
    }
  }
  for (const auto& [name, value] : known) {
    if (!used.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an argument or auxiliary state (",
                                                     absl::StrJoin(names, ", "), ")"));
    }
  }
  RETURN_IF_ERROR(infer(graph, &values));
  InferResult<T> result;
  result.complete = true;
  const auto take = [&](uint32_t entry, std::vector<T>* out) {
    out->push_back(values[entry]);
    if (values[entry] == unknown) result.complete = false;
    if constexpr (std::is_same_v<T, Shape>) {
      if (!values[entry].is_known()) result.complete = false;
    }
  };
  for (uint32_t id : graph.argument_nodes()) take(graph.entry_id(id, 0), &result.arguments);
  for (uint32_t id : graph.aux_nodes()) take(graph.entry_id(id, 0), &result.aux_states);
  for (uint32_t e : graph.output_entries()) take(e, &result.outputs);
  return result;
}

}  // namespace

absl::StatusOr<InferResult<Shape>> Symbol::InferShape(const std::map<std::string, Shape>& known) const {
  return RunInference<Shape>(outputs_, known, Shape(), ShapeAttr, InferShapes);
}

absl::StatusOr<InferResult<DType>> Symbol::InferType(const std::map<std::string, DType>& known) const {
  return RunInference<DType>(outputs_, known, DType::kUnknown, DTypeAttr, InferTypes);
}

}  // namespace tessera::graph

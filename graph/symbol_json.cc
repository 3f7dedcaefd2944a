#include "graph/symbol_json.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/indexed_graph.h"
#include "graph/node_list.h"
#include "ops/registry.h"

namespace tessera::graph {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// The format version written: MXNet 1.6 reads it, and so does every later 1.x.
constexpr int kMXNetVersion = 10600;

// MXNet's "hidden keys" (kHiddenKeys, src/c_api/c_api_symbolic.cc): attributes that MXNet
// 0.x wrote without the "__" wrapping, bare ("lr_mult") or for one argument of an operator
// ("weight_lr_mult"). A key that starts or ends with one is never an operator parameter,
// as in MXNet's UpgradeJSON_FixParsing (src/nnvm/legacy_json_util.cc).
constexpr const char* kHiddenKeys[] = {"ctx_group", "lr_mult", "wd_mult", "force_mirroring",
                                       "mirror_stage"};

bool IsHiddenKey(absl::string_view key) {
  return std::any_of(std::begin(kHiddenKeys), std::end(kHiddenKeys), [&](const char* hidden) {
    return absl::StartsWith(key, hidden) || absl::EndsWith(key, hidden);
  });
}

// The first version whose files hold the auxiliary states (BatchNorm's moving_mean and
// moving_var) as input nodes; a file without "mxnet_version" is older (MXNet 0.8), as
// MXNet's LoadLegacyJSONPass assumes.
constexpr int kFirstVersionWithAuxInputs = 900;
constexpr int kVersionOfUnversionedFiles = 800;

bool IsDunder(const std::string& key) { return AttrKey(key) == key; }

absl::Status Error(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// [node, index] or [node, index, version]; the version (MXNet's variable version) is
// irrelevant once the graph is built.
absl::StatusOr<NodeList::Entry> ParseEntry(const Json& j, absl::string_view where) {
  const bool ok =
      j.is_array() && (j.size() == 2 || j.size() == 3) &&
      std::all_of(j.begin(), j.end(), [](const Json& x) { return x.is_number_integer(); });
  if (!ok) {
    return Error(where,
                 absl::StrCat("expected [node, index] or [node, index, version], got ", j.dump()));
  }
  return NodeList::Entry{j[0].get<int64_t>(), j[1].get<int64_t>()};
}

// The string pairs of the object `node[key]` ("param", "attr" or "attrs"), sorted by key.
absl::Status ReadStrings(const Json& node, const char* key, absl::string_view where,
                         std::vector<std::pair<std::string, std::string>>* out) {
  auto it = node.find(key);
  if (it == node.end()) return absl::OkStatus();
  if (!it->is_object()) return Error(where, absl::StrCat("'", key, "' is not an object"));
  for (const auto& [name, value] : it->items()) {
    if (value.is_string()) {
      out->emplace_back(name, value.get<std::string>());
    } else if (value.is_number() || value.is_boolean()) {  // lenient: hand-edited files
      out->emplace_back(name, value.dump());
    } else {
      return Error(where, absl::StrCat("value of '", key, "' entry '", name,
                                       "' is not a string: ", value.dump()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeList::Item> ParseNode(const Json& j, int64_t position) {
  NodeList::Item item;
  const std::string anonymous = absl::StrCat("node #", position);
  if (!j.is_object()) return Error(anonymous, "not an object");
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return Error(anonymous, "missing string 'name'");
  item.name = name->get<std::string>();
  const std::string where = NodeLabel(position, item.name);
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return Error(where, "missing string 'op'");
  if (*op != "null") item.op = op->get<std::string>();

  // 0.8 kept parameters in "param" and user attributes, bare, in "attr"; from 0.9 one
  // object ("attr", then "attrs") holds both, attributes in "__name__" form.
  std::vector<std::pair<std::string, std::string>> params, attrs;
  RETURN_IF_ERROR(ReadStrings(j, "param", where, &params));
  RETURN_IF_ERROR(ReadStrings(j, "attr", where, &attrs));
  RETURN_IF_ERROR(ReadStrings(j, "attrs", where, &attrs));
  const bool old_style = j.contains("param");
  for (auto& [key, value] : params) {
    if (IsDunder(key)) {
      item.attrs[key] = std::move(value);
    } else {
      item.params.emplace_back(std::move(key), std::move(value));
    }
  }
  for (auto& [key, value] : attrs) {
    if (IsDunder(key) || item.op.empty() || old_style || IsHiddenKey(key)) {
      item.attrs[AttrKey(key)] = std::move(value);
    } else {
      item.params.emplace_back(std::move(key), std::move(value));
    }
  }

  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array()) return Error(where, "missing 'inputs' array");
  for (size_t k = 0; k < inputs->size(); ++k) {
    ASSIGN_OR_RETURN(NodeList::Entry entry,
                     ParseEntry((*inputs)[k], absl::StrCat(where, ": input #", k)));
    item.inputs.push_back(entry);
  }
  return item;
}

// MXNet's symbol JSON nests a handful of levels (root, nodes, a node, its inputs, one input).
// Deeper text is refused before nlohmann builds it: a request of a few hundred KB nested
// 100,000 levels deep overflowed the stack and killed the process that parsed it.
constexpr int kMaxJsonDepth = 64;

absl::Status CheckJsonDepth(absl::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(absl::StrCat("symbol JSON nests deeper than ",
                                                       kMaxJsonDepth, " levels at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to report
    }
  }
  return absl::OkStatus();
}

// The root's {"attrs": {"mxnet_version": ["int", N]}}, or kVersionOfUnversionedFiles.
absl::StatusOr<int> FileVersion(const Json& root) {
  auto attrs = root.find("attrs");
  if (attrs == root.end() || !attrs->is_object() || !attrs->contains("mxnet_version")) {
    return kVersionOfUnversionedFiles;
  }
  const Json& version = (*attrs)["mxnet_version"];
  if (!version.is_array() || version.size() != 2 || !version[1].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "symbol JSON: attrs.mxnet_version is not [\"int\", version]: ", version.dump()));
  }
  return version[1].get<int>();
}

// What MXNet's LoadLegacyJSONPass upgrades when it loads an older file, on the node list:
// an attribute "<argument>_lr_mult" (any hidden key) of an operator node becomes the
// "__lr_mult__" of that argument's variable (UpgradeJSON_FixParsing); and in files before
// 0.9, an operator node given just its arguments gets its auxiliary states as new
// variables "<node>_<state>" (e.g. "bn1_moving_mean") carrying the node's attributes, as
// ctx_group (UpgradeJSON_000800_000900). A node whose operator or parameters are bad is
// left for ToSymbol to report.
void UpgradeLegacyNodes(int version, NodeList* list) {
  const size_t num_nodes = list->nodes.size();  // not the variables added on the way
  for (size_t i = 0; i < num_nodes; ++i) {
    if (list->nodes[i].op.empty()) continue;
    absl::StatusOr<std::unique_ptr<ops::OperatorProperty>> prop =
        ops::OpRegistry::Global().Create(list->nodes[i].op, list->nodes[i].params);
    if (!prop.ok()) continue;
    const std::vector<std::string> arguments = (*prop)->ListArguments();
    for (size_t k = 0; k < arguments.size() && k < list->nodes[i].inputs.size(); ++k) {
      const int64_t input = list->nodes[i].inputs[k].node;
      if (input < 0 || input >= static_cast<int64_t>(num_nodes)) continue;  // ToSymbol's error
      if (!list->nodes[input].op.empty()) continue;
      for (const char* hidden : kHiddenKeys) {
        Attrs& attrs = list->nodes[i].attrs;
        auto it = attrs.find(AttrKey(absl::StrCat(arguments[k], "_", hidden)));
        if (it == attrs.end()) continue;
        list->nodes[input].attrs[AttrKey(hidden)] = it->second;
        attrs.erase(it);
      }
    }
    const std::vector<std::string> aux = (*prop)->ListAuxiliaryStates();
    if (version >= kFirstVersionWithAuxInputs || aux.empty() ||
        list->nodes[i].inputs.size() != arguments.size()) {
      continue;
    }
    for (const std::string& state : aux) {
      NodeList::Item variable;
      variable.name = absl::StrCat(list->nodes[i].name, "_", state);
      variable.attrs = list->nodes[i].attrs;
      list->nodes[i].inputs.push_back({static_cast<int64_t>(list->nodes.size()), 0});
      list->nodes.push_back(std::move(variable));
    }
  }
}

absl::StatusOr<NodeList> ParseNodeList(absl::string_view text) {
  RETURN_IF_ERROR(CheckJsonDepth(text));
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // e.what() carries line and column too.
    return absl::InvalidArgumentError(
        absl::StrCat("malformed symbol JSON at byte ", e.byte, ": ", e.what()));
  } catch (const Json::exception& e) {
    // A number beyond double's range ("6145E23323333"), say: out_of_range, not a parse_error.
    return absl::InvalidArgumentError(absl::StrCat("malformed symbol JSON: ", e.what()));
  }
  if (!root.is_object()) return absl::InvalidArgumentError("symbol JSON is not an object");
  auto nodes = root.find("nodes");
  if (nodes == root.end() || !nodes->is_array()) {
    return absl::InvalidArgumentError("symbol JSON has no 'nodes' array");
  }
  auto heads = root.find("heads");
  if (heads == root.end() || !heads->is_array()) {
    return absl::InvalidArgumentError("symbol JSON has no 'heads' array");
  }
  NodeList list;
  for (size_t i = 0; i < nodes->size(); ++i) {
    ASSIGN_OR_RETURN(NodeList::Item item, ParseNode((*nodes)[i], static_cast<int64_t>(i)));
    list.nodes.push_back(std::move(item));
  }
  for (size_t k = 0; k < heads->size(); ++k) {
    ASSIGN_OR_RETURN(NodeList::Entry head, ParseEntry((*heads)[k], absl::StrCat("head #", k)));
    list.heads.push_back(head);
  }
  // "arg_nodes" and "node_row_ptr" follow from the nodes; MXNet recomputes them too.
  ASSIGN_OR_RETURN(const int version, FileVersion(root));
  UpgradeLegacyNodes(version, &list);
  return list;
}

OrderedJson EntryJson(const NodeList::Entry& e) { return OrderedJson::array({e.node, e.index, 0}); }

std::string Scalar(const OrderedJson& v) {
  // Replace, not throw, on names that are not UTF-8.
  return v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

// MXNet's layout: objects one key per line, indented by 2; arrays of scalars or of arrays
// (entry lists, arg_nodes) on one line; arrays of objects (the nodes) one per line.
void Write(const OrderedJson& v, int indent, std::string* out) {
  const std::string pad(indent + 2, ' ');
  if (v.is_object() && !v.empty()) {
    *out += "{\n";
    size_t k = 0;
    for (auto it = v.begin(); it != v.end(); ++it) {
      absl::StrAppend(out, pad, Scalar(it.key()), ": ");
      Write(it.value(), indent + 2, out);
      *out += ++k < v.size() ? ",\n" : "\n";
    }
    absl::StrAppend(out, std::string(indent, ' '), "}");
  } else if (v.is_array() && !v.empty() && v.front().is_object()) {
    *out += "[\n";
    for (size_t k = 0; k < v.size(); ++k) {
      *out += pad;
      Write(v[k], indent + 2, out);
      *out += k + 1 < v.size() ? ",\n" : "\n";
    }
    absl::StrAppend(out, std::string(indent, ' '), "]");
  } else if (v.is_array()) {
    *out += "[";
    for (size_t k = 0; k < v.size(); ++k) {
      if (k > 0) *out += ", ";
      Write(v[k], indent, out);
    }
    *out += "]";
  } else {
    *out += Scalar(v);
  }
}

}  // namespace

absl::StatusOr<Symbol> SymbolFromJson(absl::string_view json) {
  ASSIGN_OR_RETURN(NodeList list, ParseNodeList(json));
  return ToSymbol(list);
}

std::string SymbolToJson(const Symbol& symbol) {
  const NodeList list = ToNodeList(symbol);
  const IndexedGraph graph(symbol.outputs());  // numbers nodes exactly as `list` does
  OrderedJson nodes = OrderedJson::array();
  OrderedJson arg_nodes = OrderedJson::array();
  for (size_t i = 0; i < list.nodes.size(); ++i) {
    const NodeList::Item& item = list.nodes[i];
    OrderedJson node;
    node["op"] = item.op.empty() ? "null" : item.op;
    node["name"] = item.name;
    // Parameters and "__attr__" keys never collide, so one sorted map holds both.
    std::map<std::string, std::string> attrs(item.params.begin(), item.params.end());
    attrs.insert(item.attrs.begin(), item.attrs.end());
    if (!attrs.empty()) node["attrs"] = attrs;
    node["inputs"] = OrderedJson::array();
    for (const NodeList::Entry& e : item.inputs) node["inputs"].push_back(EntryJson(e));
    nodes.push_back(std::move(node));
    if (item.op.empty()) arg_nodes.push_back(i);  // MXNet lists auxiliary states here too
  }
  OrderedJson root;
  root["nodes"] = std::move(nodes);
  root["arg_nodes"] = std::move(arg_nodes);
  root["node_row_ptr"] = graph.node_row_ptr();
  root["heads"] = OrderedJson::array();
  for (const NodeList::Entry& e : list.heads) root["heads"].push_back(EntryJson(e));
  root["attrs"] = {{"mxnet_version", OrderedJson::array({"int", kMXNetVersion})}};
  std::string out;
  Write(root, 0, &out);
  return out + "\n";
}

absl::StatusOr<Symbol> LoadSymbolFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open symbol file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<Symbol> symbol = SymbolFromJson(text.str());
  if (!symbol.ok()) {
    return absl::Status(symbol.status().code(),
                        absl::StrCat(path, ": ", symbol.status().message()));
  }
  return symbol;
}

absl::Status SaveSymbolFile(const Symbol& symbol, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create symbol file '", path, "'"));
  }
  out << SymbolToJson(symbol);
  out.close();
  if (!out) {
    return absl::DataLossError(absl::StrCat("cannot write symbol file '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace tessera::graph

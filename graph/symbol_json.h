// MXNet's symbol JSON ("model-symbol.json") to and from Symbols, so networks exported by
// MXNet 0.8 through 1.x load here and ours load in MXNet.
//
// Reading accepts every generation of the format: node parameters and attributes under
// "attrs" (1.x), "attr" (0.9-0.12), or "param" plus "attr" (0.8 and earlier, with
// "backward_source_id"); input and head entries as [node, index] or [node, index, version].
// Keys in "__name__" form are node attributes; so is every key of a variable or of a 0.8
// "attr", and every key that starts or ends with lr_mult, wd_mult, ctx_group,
// force_mirroring or mirror_stage, which old files wrote without the underscores. Other keys
// are operator parameters, and operators are found by MXNet's names and aliases (0.8's
// _Plus, _MulScalar, Softmax, ...). Then what MXNet's own loader upgrades in older files
// (src/nnvm/legacy_json_util.cc): an operator's "<argument>_lr_mult" (any of those keys)
// becomes the "__lr_mult__" of that argument's variable; and in a file before 0.9 (no
// "mxnet_version"), an operator given only its arguments - 0.8's BatchNorm - gets its
// auxiliary states as new variables "<node>_<state>" ("bn1_moving_mean") with the node's
// attributes. Errors are INVALID_ARGUMENT (NOT_FOUND for an unknown operator) naming the
// node by position and name, e.g. "node #3 'fc1' (FullyConnected): takes 3 inputs (data,
// weight, bias), got 2".
//
// Writing produces MXNet 1.6's form: nodes in IndexedGraph order, "attrs" holding every
// operator parameter (GetParams) and attribute as strings, entries as [node, index, 0],
// "arg_nodes", "node_row_ptr", "heads" and {"mxnet_version": ["int", 10600]}.
//
// Stateless functions; safe from any thread (while no one calls SetAttr on the symbol).
#ifndef TESSERA_GRAPH_SYMBOL_JSON_H_
#define TESSERA_GRAPH_SYMBOL_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/symbol.h"

namespace tessera::graph {

absl::StatusOr<Symbol> SymbolFromJson(absl::string_view json);
// Pretty-printed like MXNet's own output (objects indented by 2, entry lists on one line).
std::string SymbolToJson(const Symbol& symbol);

// The same through a file; errors name the file.
absl::StatusOr<Symbol> LoadSymbolFile(const std::string& path);
absl::Status SaveSymbolFile(const Symbol& symbol, const std::string& path);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_SYMBOL_JSON_H_

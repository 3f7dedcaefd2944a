// MXNet's symbol JSON ("model-symbol.json") to and from Symbols, so networks exported by
// MXNet 0.8 through 1.x load here and ours load in MXNet.
//
// Reading accepts every generation of the format: node parameters and attributes under
// "attrs" (1.x), "attr" (0.9-0.12), or "param" plus "attr" (0.8 and earlier, with
// "backward_source_id"); input and head entries as [node, index] or [node, index, version].
// Keys in "__name__" form are node attributes; so are lr_mult, wd_mult, ctx_group,
// force_mirroring and mirror_stage, and every key of a variable or of a 0.8 "attr", which
// old files wrote without the underscores. Other keys are operator parameters. Errors are
// INVALID_ARGUMENT (NOT_FOUND for an unknown operator) naming the node by position and
// name, e.g. "node #3 'fc1' (FullyConnected): takes 3 inputs (data, weight, bias), got 2".
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

// Symbol: a symbolic network, as MXNet's symbol API composes one. A Symbol is a list of
// output entries of shared nodes; composing a symbol adds one node on top and shares
// everything below.
//
//   Symbol data = Symbol::Variable("data");
//   ASSIGN_OR_RETURN(Symbol fc1, Symbol::Create("FullyConnected", {{"num_hidden", "128"}},
//                                               {data}, "fc1"));
//   ASSIGN_OR_RETURN(Symbol act, Symbol::Create("Activation", {{"act_type", "relu"}},
//                                               {{"data", fc1}}));
//
// Inputs not given become variables named "<node>_<argument>" (fc1_weight, fc1_bias,
// bn_moving_mean), so parameters need not be declared. Unnamed nodes are named after their
// operator with a process-wide counter ("activation0"), as MXNet's NameManager does.
//
// Thread safety: Symbols are values over immutable nodes, except SetAttr, which changes the
// head nodes' attributes (seen by every symbol sharing them); do not call it concurrently
// with other uses of those nodes.
#ifndef TESSERA_GRAPH_SYMBOL_H_
#define TESSERA_GRAPH_SYMBOL_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "graph/node.h"
#include "ops/param.h"

namespace tessera::graph {

class Symbol;

// One input of Symbol::Create: positional (`x`) or by argument name (`{"weight", w}`).
struct SymbolInput {
  SymbolInput(const Symbol& symbol);  // NOLINT(google-explicit-constructor): positional
  SymbolInput(std::string name, const Symbol& symbol);
  std::string name;
  const Symbol* symbol;
};

// What InferShape/InferType found. Unknown results are empty shapes / DType::kUnknown;
// `complete` says whether everything is known.
template <typename T>
struct InferResult {
  std::vector<T> arguments;  // in ListArguments order
  std::vector<T> outputs;    // in ListOutputs order
  std::vector<T> aux_states; // in ListAuxiliaryStates order
  bool complete = false;
};

class Symbol {
 public:
  Symbol() = default;
  explicit Symbol(std::vector<NodeEntry> outputs) : outputs_(std::move(outputs)) {}

  // A variable (an argument or auxiliary state bound at Bind time). `attrs` keys may be
  // given with or without the "__" wrapping ("lr_mult" or "__lr_mult__").
  static Symbol Variable(const std::string& name, const Attrs& attrs = {});

  // Operator `op` applied to `inputs`, which are given positionally (in ListArguments
  // order, auxiliary states after the arguments) or by name, not both for one argument.
  // Errors name the node: an unknown operator, bad parameters, an unknown input name, an
  // input given twice, too many inputs, an input symbol with several outputs.
  static absl::StatusOr<Symbol> Create(absl::string_view op, const ops::KwArgs& params,
                                       const std::vector<SymbolInput>& inputs,
                                       const std::string& name = "", const Attrs& attrs = {});

  // The outputs of every symbol, in order.
  static Symbol Group(const std::vector<Symbol>& symbols);

  // Output `index` alone; OUT_OF_RANGE naming the outputs when there is no such output.
  absl::StatusOr<Symbol> operator[](size_t index) const;
  // The output named `name` (as ListOutputs spells it); NOT_FOUND otherwise.
  absl::StatusOr<Symbol> GetOutput(absl::string_view name) const;
  // Every output of every node, so intermediate values can be bound or monitored.
  Symbol GetInternals() const;

  size_t NumOutputs() const { return outputs_.size(); }
  const std::vector<NodeEntry>& outputs() const { return outputs_; }

  std::vector<std::string> ListArguments() const;
  std::vector<std::string> ListOutputs() const;
  std::vector<std::string> ListAuxiliaryStates() const;

  // Attributes of the (single) head node.
  std::optional<std::string> GetAttr(const std::string& key) const;
  // Sets `key` on every head node.
  void SetAttr(const std::string& key, const std::string& value);
  // Attributes of every node by node name (nodes without attributes left out).
  std::map<std::string, Attrs> ListAttrs() const;

  // Partial inference from the shapes of some arguments (by name) and the "__shape__"
  // attributes of variables. A known shape that contradicts what an operator implies is
  // INVALID_ARGUMENT naming the node, the argument and both shapes; an unknown argument
  // name is INVALID_ARGUMENT naming it and listing the arguments.
  absl::StatusOr<InferResult<Shape>> InferShape(const std::map<std::string, Shape>& known) const;
  // The same for element types ("__dtype__" attributes; default when nothing is known
  // anywhere: none, results stay kUnknown).
  absl::StatusOr<InferResult<DType>> InferType(const std::map<std::string, DType>& known) const;

 private:
  std::vector<NodeEntry> outputs_;
};

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_SYMBOL_H_

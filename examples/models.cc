#include "examples/models.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessera::examples {

using graph::Symbol;

absl::StatusOr<Symbol> Mlp(int num_hidden_layers, int hidden, int num_classes, const char* act) {
  return MlpWithWidths(std::vector<int>(num_hidden_layers, hidden), num_classes, act);
}

absl::StatusOr<Symbol> MlpWithWidths(const std::vector<int>& hidden, int num_classes, const char* act) {
  Symbol x = Symbol::Variable("data");
  const std::string act_prefix = std::string(act) == "relu" ? "relu" : "act";
  const int num_hidden_layers = static_cast<int>(hidden.size());
  for (int i = 1; i <= num_hidden_layers; ++i) {
    ASSIGN_OR_RETURN(x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(hidden[i - 1])}}, {x},
                                       absl::StrCat("fc", i)));
    ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", act}}, {x},
                                       absl::StrCat(act_prefix, i)));
  }
  ASSIGN_OR_RETURN(x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(num_classes)}},
                                     {x}, absl::StrCat("fc", num_hidden_layers + 1)));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

absl::StatusOr<Symbol> LeNet(int num_classes) {
  Symbol x = Symbol::Variable("data");
  ASSIGN_OR_RETURN(x, Symbol::Create("Convolution", {{"kernel", "(5,5)"}, {"num_filter", "20"}}, {x}, "conv1"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu1"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}},
                                     {x}, "pool1"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Convolution", {{"kernel", "(5,5)"}, {"num_filter", "50"}}, {x}, "conv2"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu2"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}},
                                     {x}, "pool2"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Flatten", {}, {x}, "flatten"));
  ASSIGN_OR_RETURN(x, Symbol::Create("FullyConnected", {{"num_hidden", "500"}}, {x}, "fc1"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu3"));
  ASSIGN_OR_RETURN(x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(num_classes)}}, {x}, "fc2"));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

std::vector<std::string> BuiltinModelNames() { return {"mlp", "lenet"}; }

absl::StatusOr<graph::Symbol> BuiltinModel(const std::string& name) {
  if (name == "mlp") return MlpWithWidths({128, 64});
  if (name == "lenet") return LeNet();
  return absl::InvalidArgumentError(absl::StrCat("unknown built-in model '", name, "' (",
                                                 absl::StrJoin(BuiltinModelNames(), ", "), ")"));
}

}  // namespace tessera::examples

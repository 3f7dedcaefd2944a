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

absl::StatusOr<Symbol> MlpWithWidths(const std::vector<int>& hidden, int num_classes,
                                     const char* act) {
  Symbol x = Symbol::Variable("data");
  const std::string act_prefix = std::string(act) == "relu" ? "relu" : "act";
  const int num_hidden_layers = static_cast<int>(hidden.size());
  for (int i = 1; i <= num_hidden_layers; ++i) {
    ASSIGN_OR_RETURN(
        x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(hidden[i - 1])}}, {x},
                          absl::StrCat("fc", i)));
    ASSIGN_OR_RETURN(
        x, Symbol::Create("Activation", {{"act_type", act}}, {x}, absl::StrCat(act_prefix, i)));
  }
  ASSIGN_OR_RETURN(x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(num_classes)}},
                                     {x}, absl::StrCat("fc", num_hidden_layers + 1)));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

absl::StatusOr<Symbol> LeNet(int num_classes) {
  Symbol x = Symbol::Variable("data");
  ASSIGN_OR_RETURN(
      x, Symbol::Create("Convolution", {{"kernel", "(5,5)"}, {"num_filter", "20"}}, {x}, "conv1"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu1"));
  ASSIGN_OR_RETURN(
      x, Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}},
                        {x}, "pool1"));
  ASSIGN_OR_RETURN(
      x, Symbol::Create("Convolution", {{"kernel", "(5,5)"}, {"num_filter", "50"}}, {x}, "conv2"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu2"));
  ASSIGN_OR_RETURN(
      x, Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}},
                        {x}, "pool2"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Flatten", {}, {x}, "flatten"));
  ASSIGN_OR_RETURN(x, Symbol::Create("FullyConnected", {{"num_hidden", "500"}}, {x}, "fc1"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu3"));
  ASSIGN_OR_RETURN(
      x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(num_classes)}}, {x}, "fc2"));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

namespace {

// MXNet resnet.py's BatchNorm settings.
absl::StatusOr<Symbol> BatchNorm(const Symbol& x, const std::string& name) {
  return Symbol::Create("BatchNorm", {{"fix_gamma", "false"}, {"eps", "2e-5"}, {"momentum", "0.9"}},
                        {x}, name);
}

absl::StatusOr<Symbol> Conv(const Symbol& x, const std::string& name, int filters, int kernel,
                            int stride) {
  const int pad = kernel / 2;
  return Symbol::Create("Convolution",
                        {{"kernel", absl::StrCat("(", kernel, ",", kernel, ")")},
                         {"stride", absl::StrCat("(", stride, ",", stride, ")")},
                         {"pad", absl::StrCat("(", pad, ",", pad, ")")},
                         {"num_filter", absl::StrCat(filters)},
                         {"no_bias", "true"}},
                        {x}, name);
}

absl::StatusOr<Symbol> Relu(const Symbol& x, const std::string& name) {
  return Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, name);
}

// One basic block; `project` gives the shortcut a 1x1 conv + BatchNorm (where the stride or
// the width changes), else the shortcut is the identity.
absl::StatusOr<Symbol> BasicBlock(const Symbol& x, const std::string& name, int filters, int stride,
                                  bool project) {
  ASSIGN_OR_RETURN(Symbol y, Conv(x, name + "_conv1", filters, 3, stride));
  ASSIGN_OR_RETURN(y, BatchNorm(y, name + "_bn1"));
  ASSIGN_OR_RETURN(y, Relu(y, name + "_relu1"));
  ASSIGN_OR_RETURN(y, Conv(y, name + "_conv2", filters, 3, 1));
  ASSIGN_OR_RETURN(y, BatchNorm(y, name + "_bn2"));
  Symbol shortcut = x;
  if (project) {
    ASSIGN_OR_RETURN(shortcut, Conv(x, name + "_conv1sc", filters, 1, stride));
    ASSIGN_OR_RETURN(shortcut, BatchNorm(shortcut, name + "_sc"));
  }
  ASSIGN_OR_RETURN(Symbol sum, Symbol::Create("ElementWiseSum", {{"num_args", "2"}}, {y, shortcut},
                                              name + "_plus"));
  return Relu(sum, name + "_relu");
}

}  // namespace

absl::StatusOr<Symbol> ResNet18Cifar(int num_classes) {
  Symbol x = Symbol::Variable("data");
  ASSIGN_OR_RETURN(x, Conv(x, "conv0", 64, 3, 1));
  ASSIGN_OR_RETURN(x, BatchNorm(x, "bn0"));
  ASSIGN_OR_RETURN(x, Relu(x, "relu0"));
  constexpr int kFilters[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int unit = 0; unit < 2; ++unit) {
      // Stage 1 keeps the stem's 64 channels and 32x32 plane: no projection there.
      const bool first = unit == 0 && stage > 0;
      ASSIGN_OR_RETURN(x, BasicBlock(x, absl::StrCat("stage", stage + 1, "_unit", unit + 1),
                                     kFilters[stage], first ? 2 : 1, first));
    }
  }
  ASSIGN_OR_RETURN(
      x, Symbol::Create("Pooling", {{"pool_type", "avg"}, {"global_pool", "true"}}, {x}, "pool1"));
  ASSIGN_OR_RETURN(
      x, Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(num_classes)}}, {x}, "fc1"));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

std::vector<std::string> BuiltinModelNames() { return {"mlp", "lenet", "resnet18_cifar"}; }

absl::StatusOr<graph::Symbol> BuiltinModel(const std::string& name) {
  if (name == "mlp") return MlpWithWidths({128, 64});
  if (name == "lenet") return LeNet();
  if (name == "resnet18_cifar") return ResNet18Cifar();
  return absl::InvalidArgumentError(absl::StrCat("unknown built-in model '", name, "' (",
                                                 absl::StrJoin(BuiltinModelNames(), ", "), ")"));
}

}  // namespace tessera::examples

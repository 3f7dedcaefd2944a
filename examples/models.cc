#include "examples/models.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
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

// A square convolution padded to keep the plane (at stride 1); without a bias unless asked,
// as BatchNorm follows it in the ResNets.
absl::StatusOr<Symbol> Conv(const Symbol& x, const std::string& name, int filters, int kernel,
                            int stride, bool bias = false) {
  const int pad = kernel / 2;
  return Symbol::Create("Convolution",
                        {{"kernel", absl::StrCat("(", kernel, ",", kernel, ")")},
                         {"stride", absl::StrCat("(", stride, ",", stride, ")")},
                         {"pad", absl::StrCat("(", pad, ",", pad, ")")},
                         {"num_filter", absl::StrCat(filters)},
                         {"no_bias", bias ? "false" : "true"}},
                        {x}, name);
}

absl::StatusOr<Symbol> MaxPool(const Symbol& x, const std::string& name, int kernel, int stride,
                               int pad) {
  return Symbol::Create("Pooling",
                        {{"pool_type", "max"},
                         {"kernel", absl::StrCat("(", kernel, ",", kernel, ")")},
                         {"stride", absl::StrCat("(", stride, ",", stride, ")")},
                         {"pad", absl::StrCat("(", pad, ",", pad, ")")}},
                        {x}, name);
}

absl::StatusOr<Symbol> Dense(const Symbol& x, const std::string& name, int units) {
  return Symbol::Create("FullyConnected", {{"num_hidden", absl::StrCat(units)}}, {x}, name);
}

absl::StatusOr<Symbol> Relu(const Symbol& x, const std::string& name) {
  return Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, name);
}

// A residual block's end: `y` plus the block's input `x` (through a 1x1 conv + BatchNorm
// projection when `project`), then ReLU.
absl::StatusOr<Symbol> JoinShortcut(const Symbol& x, const Symbol& y, const std::string& name,
                                    int filters, int stride, bool project) {
  Symbol shortcut = x;
  if (project) {
    ASSIGN_OR_RETURN(shortcut, Conv(x, name + "_conv1sc", filters, 1, stride));
    ASSIGN_OR_RETURN(shortcut, BatchNorm(shortcut, name + "_sc"));
  }
  ASSIGN_OR_RETURN(Symbol sum, Symbol::Create("ElementWiseSum", {{"num_args", "2"}}, {y, shortcut},
                                              name + "_plus"));
  return Relu(sum, name + "_relu");
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
  return JoinShortcut(x, y, name, filters, stride, project);
}

// One bottleneck block of ResNet-50 v1: 1x1 (filters / 4), 3x3 (filters / 4, the stride),
// 1x1 (filters), each followed by BatchNorm, ReLU but the last; the shortcut as BasicBlock's.
absl::StatusOr<Symbol> BottleneckBlock(const Symbol& x, const std::string& name, int filters,
                                       int stride, bool project) {
  ASSIGN_OR_RETURN(Symbol y, Conv(x, name + "_conv1", filters / 4, 1, 1));
  ASSIGN_OR_RETURN(y, BatchNorm(y, name + "_bn1"));
  ASSIGN_OR_RETURN(y, Relu(y, name + "_relu1"));
  ASSIGN_OR_RETURN(y, Conv(y, name + "_conv2", filters / 4, 3, stride));
  ASSIGN_OR_RETURN(y, BatchNorm(y, name + "_bn2"));
  ASSIGN_OR_RETURN(y, Relu(y, name + "_relu2"));
  ASSIGN_OR_RETURN(y, Conv(y, name + "_conv3", filters, 1, 1));
  ASSIGN_OR_RETURN(y, BatchNorm(y, name + "_bn3"));
  return JoinShortcut(x, y, name, filters, stride, project);
}

}  // namespace

absl::StatusOr<Symbol> ResNet50(int num_classes) {
  Symbol x = Symbol::Variable("data");
  ASSIGN_OR_RETURN(x, Conv(x, "conv0", 64, 7, 2));
  ASSIGN_OR_RETURN(x, BatchNorm(x, "bn0"));
  ASSIGN_OR_RETURN(x, Relu(x, "relu0"));
  ASSIGN_OR_RETURN(x, MaxPool(x, "pool0", 3, 2, 1));
  constexpr int kUnits[] = {3, 4, 6, 3};
  constexpr int kFilters[] = {256, 512, 1024, 2048};
  for (int stage = 0; stage < 4; ++stage) {
    for (int unit = 0; unit < kUnits[stage]; ++unit) {
      const int stride = unit == 0 && stage > 0 ? 2 : 1;
      ASSIGN_OR_RETURN(x, BottleneckBlock(x, absl::StrCat("stage", stage + 1, "_unit", unit + 1),
                                          kFilters[stage], stride, /*project=*/unit == 0));
    }
  }
  ASSIGN_OR_RETURN(
      x, Symbol::Create("Pooling", {{"pool_type", "avg"}, {"global_pool", "true"}}, {x}, "pool1"));
  ASSIGN_OR_RETURN(x, Dense(x, "fc1", num_classes));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

absl::StatusOr<Symbol> Vgg16(int num_classes) {
  Symbol x = Symbol::Variable("data");
  constexpr int kConvs[] = {2, 2, 3, 3, 3};
  constexpr int kFilters[] = {64, 128, 256, 512, 512};
  for (int stage = 0; stage < 5; ++stage) {
    for (int i = 0; i < kConvs[stage]; ++i) {
      const std::string suffix = absl::StrCat(stage + 1, "_", i + 1);
      ASSIGN_OR_RETURN(x, Conv(x, "conv" + suffix, kFilters[stage], 3, 1, /*bias=*/true));
      ASSIGN_OR_RETURN(x, Relu(x, "relu" + suffix));
    }
    ASSIGN_OR_RETURN(x, MaxPool(x, absl::StrCat("pool", stage + 1), 2, 2, 0));
  }
  ASSIGN_OR_RETURN(x, Symbol::Create("Flatten", {}, {x}, "flatten"));
  for (int fc : {6, 7}) {
    ASSIGN_OR_RETURN(x, Dense(x, absl::StrCat("fc", fc), 4096));
    ASSIGN_OR_RETURN(x, Relu(x, absl::StrCat("relu", fc)));
    ASSIGN_OR_RETURN(x, Symbol::Create("Dropout", {{"p", "0.5"}}, {x}, absl::StrCat("drop", fc)));
  }
  ASSIGN_OR_RETURN(x, Dense(x, "fc8", num_classes));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

absl::StatusOr<Symbol> EmbeddingMlp(int vocabulary, int embedding, int num_classes) {
  Symbol x = Symbol::Variable("data");
  ASSIGN_OR_RETURN(x, Symbol::Create("Embedding",
                                     {{"input_dim", absl::StrCat(vocabulary)},
                                      {"output_dim", absl::StrCat(embedding)}},
                                     {x}, "embed"));
  ASSIGN_OR_RETURN(x, Symbol::Create("Flatten", {}, {x}, "flatten"));
  ASSIGN_OR_RETURN(x, Dense(x, "fc1", 256));
  ASSIGN_OR_RETURN(x, Relu(x, "relu1"));
  ASSIGN_OR_RETURN(x, Dense(x, "fc2", 128));
  ASSIGN_OR_RETURN(x, Relu(x, "relu2"));
  ASSIGN_OR_RETURN(x, Dense(x, "fc3", num_classes));
  return Symbol::Create("SoftmaxOutput", {}, {x}, "softmax");
}

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

absl::StatusOr<std::vector<std::pair<std::string, Shape>>> ParameterShapes(
    const Symbol& net, const std::map<std::string, Shape>& inputs) {
  ASSIGN_OR_RETURN(graph::InferResult<Shape> shapes, net.InferShape(inputs));
  const std::vector<std::string> names = net.ListArguments();
  std::vector<std::pair<std::string, Shape>> params;
  for (size_t i = 0; i < names.size(); ++i) {
    if (inputs.contains(names[i]) || absl::EndsWith(names[i], "_label")) continue;
    if (shapes.arguments[i].ndim() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument '", names[i], "': its shape does not follow from the inputs given"));
    }
    params.emplace_back(names[i], shapes.arguments[i]);
  }
  return params;
}

absl::StatusOr<std::vector<double>> ParameterFlops(const Symbol& net,
                                                   const std::map<std::string, Shape>& inputs) {
  ASSIGN_OR_RETURN(const auto params, ParameterShapes(net, inputs));
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < params.size(); ++i) position[params[i].first] = i;
  const Symbol internals = net.GetInternals();
  ASSIGN_OR_RETURN(const graph::InferResult<Shape> shapes, internals.InferShape(inputs));
  std::vector<double> flops(params.size(), 0);
  std::vector<bool> found(params.size(), false);
  for (size_t o = 0; o < internals.outputs().size(); ++o) {
    const graph::NodeEntry& entry = internals.outputs()[o];
    if (entry.node->is_variable() || entry.index != 0) continue;
    const Shape& out = shapes.outputs[o];
    const std::string op = entry.node->OpName();
    const bool product = op == "Convolution" || op == "Deconvolution" || op == "FullyConnected";
    for (const graph::NodeEntry& input : entry.node->inputs) {
      auto at = position.find(input.node->name);
      if (!input.node->is_variable() || at == position.end()) continue;
      const Shape& param = params[at->second].second;
      const bool weight = product && absl::EndsWith(input.node->name, "_weight") && out.ndim() >= 2;
      flops[at->second] = weight ? 2.0 * static_cast<double>(param.Size()) *
                                       static_cast<double>(out.Size() / out[1])
                                 : static_cast<double>(out.Size());
      found[at->second] = true;
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!found[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", params[i].first, "': no operator of the network uses it"));
    }
  }
  return flops;
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

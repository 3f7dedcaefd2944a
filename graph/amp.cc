#include "graph/amp.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/indexed_graph.h"
#include "graph/infer.h"
#include "ops/registry.h"

namespace tessera::graph {

const std::vector<std::string>& AmpFloat32Ops() {
  // MXNet's FP32_FUNCS of the operators Tessera has (python/mxnet/amp/lists/symbol_fp16.py).
  static const auto* ops = new std::vector<std::string>{
      "BatchNorm", "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput",
      "MakeLoss", "SoftmaxOutput", "_power_scalar", "_rpower_scalar", "broadcast_power", "cos",
      "exp", "log", "log_softmax", "max", "mean", "min", "prod", "reciprocal", "rsqrt", "sin",
      "smooth_l1", "softmax", "sqrt", "square", "sum"};
  return *ops;
}

const std::vector<std::string>& AmpLowPrecisionOps() {
  static const auto* ops = new std::vector<std::string>{"Convolution", "Deconvolution",
                                                        "FullyConnected", "batch_dot", "dot"};
  return *ops;
}

const std::vector<std::string>& AmpLossOps() {
  static const auto* ops = new std::vector<std::string>{
      "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput", "MakeLoss",
      "SoftmaxOutput"};
  return *ops;
}

namespace {

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// The wider of two float types: float32 over both half types (which do not hold each
// other's values), float64 over everything.
DType Wider(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kFloat64 || b == DType::kFloat64) return DType::kFloat64;
  return DType::kFloat32;
}

class AmpPass {
 public:
  AmpPass(const AmpOptions& options, const std::map<std::string, DType>& input_types)
      : options_(options), input_types_(input_types) {}

  absl::StatusOr<Symbol> Run(const Symbol& symbol) {
    IndexedGraph graph(symbol.outputs());
    std::set<std::string> excluded(options_.excluded_nodes.begin(), options_.excluded_nodes.end());
    for (uint32_t id = 0; id < graph.num_nodes(); ++id) excluded.erase(graph.node(id).name);
    if (!excluded.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "amp: excluded node(s) ", absl::StrJoin(excluded, ", "), " not in the graph"));
    }
    new_nodes_.resize(graph.num_nodes());
    for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
      const Node& node = graph.node(id);
      if (node.is_variable()) {
        RETURN_IF_ERROR(AddVariable(graph.node_ptr(id)));
        new_nodes_[id] = graph.node_ptr(id);  // variables are shared, not copied
        continue;
      }
      std::vector<NodeEntry> inputs;
      for (const NodeEntry& in : node.inputs) {
        inputs.push_back({new_nodes_[graph.node_id(in.node.get())], in.index});
      }
      ASSIGN_OR_RETURN(new_nodes_[id], AddOperator(node, std::move(inputs)));
    }
    std::vector<NodeEntry> outputs;
    for (const IndexedGraph::Entry& out : graph.outputs()) {
      outputs.push_back({new_nodes_[out.node_id], out.index});
    }
    return Symbol(std::move(outputs));
  }

 private:
  absl::Status AddVariable(const std::shared_ptr<Node>& node) {
    DType type = DType::kFloat32;
    if (auto it = input_types_.find(node->name); it != input_types_.end()) {
      type = it->second;
    } else {
      ASSIGN_OR_RETURN(DType attr, DTypeAttr(*node));
      if (attr != DType::kUnknown) type = attr;
    }
    types_[node.get()] = {type};
    return absl::OkStatus();
  }

  // A copy of operator node `old` over `inputs` (the new graph's), with the casts it needs.
  absl::StatusOr<std::shared_ptr<Node>> AddOperator(const Node& old, std::vector<NodeEntry> inputs) {
    const int num_args = old.num_arguments();
    std::vector<DType> in(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) in[i] = TypeOf(inputs[i]);
    const std::string op = old.OpName();
    const bool excluded = Contains(options_.excluded_nodes, old.name);
    // The type each float argument should have; kUnknown leaves it as it is.
    DType want = DType::kUnknown;
    if (excluded || Contains(AmpFloat32Ops(), op)) {
      want = DType::kFloat32;
    } else if (Contains(AmpLowPrecisionOps(), op)) {
      want = options_.dtype;
    } else {
      DType widest = DType::kUnknown;
      for (int i = 0; i < num_args; ++i) {
        if (!IsFloatingPoint(in[i])) continue;
        widest = widest == DType::kUnknown ? in[i] : Wider(widest, in[i]);
      }
      want = widest;
    }
    auto cast_arguments = [&](DType to) -> absl::Status {
      if (to == DType::kUnknown) return absl::OkStatus();
      for (int i = 0; i < num_args; ++i) {
        if (!IsFloatingPoint(in[i]) || in[i] == to) continue;
        ASSIGN_OR_RETURN(inputs[i], Cast(inputs[i], to));
        in[i] = to;
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(cast_arguments(want));
    absl::StatusOr<std::vector<DType>> out = OutputTypes(old, in, num_args);
    if (!out.ok() && want != DType::kFloat32 &&
        std::any_of(in.begin(), in.begin() + num_args, IsHalf)) {
      // Its kernels do not take the low type: float32 then.
      RETURN_IF_ERROR(cast_arguments(DType::kFloat32));
      out = OutputTypes(old, in, num_args);
    }
    if (!out.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("amp: node '", old.name, "' (", op, "): ", out.status().message()));
    }
    auto node = std::make_shared<Node>();
    node->name = old.name;
    node->op = old.op;
    if (options_.loss_scale != 1 && Contains(AmpLossOps(), op)) {
      ASSIGN_OR_RETURN(node->op, ScaledLoss(old));
    }
    if (options_.dynamic_loss_scale && Contains(AmpLossOps(), op)) {
      ASSIGN_OR_RETURN(inputs[0], LossScaled(old.name, inputs[0]));
    }
    node->attrs = old.attrs;
    node->inputs = std::move(inputs);
    types_[node.get()] = *std::move(out);
    return node;
  }

  // What the operator of `node` infers for its outputs from input types `in`.
  static absl::StatusOr<std::vector<DType>> OutputTypes(const Node& node, std::vector<DType> in,
                                                        int num_args) {
    std::vector<DType> aux(in.begin() + num_args, in.end());
    in.resize(num_args);
    std::vector<DType> out(node.num_outputs(), DType::kUnknown);
    ASSIGN_OR_RETURN(bool known, node.op->InferType(&in, &out, &aux));
    if (!known || std::find(out.begin(), out.end(), DType::kUnknown) != out.end()) {
      return absl::InvalidArgumentError("cannot infer the types of its outputs");
    }
    return out;
  }

  // The operator of loss node `old` with its grad_scale multiplied by the loss scale.
  absl::StatusOr<std::shared_ptr<const ops::OperatorProperty>> ScaledLoss(const Node& old) const {
    std::map<std::string, std::string> params = old.op->GetParams();
    double grad_scale = 1;
    if (auto it = params.find("grad_scale"); it != params.end() && !absl::SimpleAtod(it->second, &grad_scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("amp: node '", old.name, "': grad_scale '", it->second, "' is not a number"));
    }
    params["grad_scale"] = absl::StrFormat("%.9g", grad_scale * options_.loss_scale);
    ASSIGN_OR_RETURN(std::unique_ptr<ops::OperatorProperty> scaled,
                     ops::OpRegistry::Global().Create(old.OpName(),
                                                      ops::KwArgs(params.begin(), params.end())));
    return std::shared_ptr<const ops::OperatorProperty>(std::move(scaled));
  }

  // `data` through a _amp_loss_scale node reading the shared scale (see AmpOptions).
  absl::StatusOr<NodeEntry> LossScaled(const std::string& loss, const NodeEntry& data) {
    if (scale_ == nullptr) {
      scale_ = std::make_shared<Symbol>(Symbol::Variable(kAmpLossScale));
      types_[scale_->outputs()[0].node.get()] = {DType::kFloat32};
    }
    ASSIGN_OR_RETURN(Symbol scaled, Symbol::Create("_amp_loss_scale", {}, {Symbol({data}), *scale_},
                                                   absl::StrCat(loss, "_loss_scale")));
    types_[scaled.outputs()[0].node.get()] = {TypeOf(data)};
    return scaled.outputs()[0];
  }

  DType TypeOf(const NodeEntry& e) const { return types_.at(e.node.get())[e.index]; }

  // `e` as `to`: one amp_cast per (entry, type), shared by all that need it.
  absl::StatusOr<NodeEntry> Cast(const NodeEntry& e, DType to) {
    const auto key = std::make_tuple(e.node.get(), e.index, to);
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    ASSIGN_OR_RETURN(Symbol cast,
                     Symbol::Create("amp_cast", {{"dtype", DTypeName(to)}}, {Symbol({e})},
                                    absl::StrCat(e.node->OutputName(e.index), "_amp_", DTypeName(to))));
    const NodeEntry made = cast.outputs()[0];
    types_[made.node.get()] = {to};
    casts_.emplace(key, made);
    return made;
  }

  const AmpOptions& options_;
  const std::map<std::string, DType>& input_types_;
  std::vector<std::shared_ptr<Node>> new_nodes_;  // by the old graph's node id
  absl::flat_hash_map<const Node*, std::vector<DType>> types_;
  std::map<std::tuple<const Node*, uint32_t, DType>, NodeEntry> casts_;
  std::shared_ptr<Symbol> scale_;  // the loss scale's variable, once made
};

}  // namespace

absl::StatusOr<Symbol> ConvertToMixedPrecision(const Symbol& symbol, const AmpOptions& options,
                                               const std::map<std::string, DType>& input_types) {
  if (!IsHalf(options.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("amp: dtype ", DTypeName(options.dtype),
                                                   " is not a mixed-precision type (float16, bfloat16)"));
  }
  if (options.dynamic_loss_scale && options.loss_scale != 1) {
    return absl::InvalidArgumentError("amp: a static loss_scale and dynamic loss scaling together");
  }
  if (!(options.loss_scale > 0) || !std::isfinite(options.loss_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("amp: loss_scale ", options.loss_scale, " is not a positive number"));
  }
  return AmpPass(options, input_types).Run(symbol);
}

int CountAmpCasts(const Symbol& symbol) {
  IndexedGraph graph(symbol.outputs());
  int casts = 0;
  for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
    if (!graph.node(id).is_variable() && graph.node(id).OpName() == "amp_cast") ++casts;
  }
  return casts;
}

}  // namespace tessera::graph

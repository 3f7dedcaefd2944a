// Automatic mixed precision: a graph pass that casts as MXNet's AMP (amp.convert_symbol)
// does, so that the products run in a 16-bit type while everything whose range or precision
// matters stays float32.
//
//   - Products (FullyConnected, Convolution, Deconvolution, dot, batch_dot) take their float
//     inputs in the low type: on a GPU they run on tensor cores, on a CPU through oneDNN
//     staging (ops/nn/dnnl_util.h) with the same numbers.
//   - Softmax, the loss outputs, BatchNorm (its statistics), reductions, exp/log and the
//     other functions of kFloat32Ops take float32 inputs.
//   - Everything else runs in the type that reaches it: inputs of different float types are
//     cast to the widest (elemwise_add of a float32 and a bfloat16 array adds in float32),
//     and an operator whose kernels do not take the low type (its InferType refuses it) gets
//     float32.
//
// A cast is an amp_cast node, made once per (edge source, type) and shared by every consumer.
// Variables keep their types: the weights stay float32 (MXNet's multi_precision master
// copies), and their gradients come back through the casts' backward as float32. Nothing
// else of the graph changes: argument and auxiliary-state names and order, node names and
// attributes are the original's.
#ifndef TESSERA_GRAPH_AMP_H_
#define TESSERA_GRAPH_AMP_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "graph/symbol.h"

namespace tessera::graph {

struct AmpOptions {
  // kFloat16 or kBFloat16.
  DType dtype = DType::kBFloat16;
  // Nodes kept in float32 whatever their operator (MXNet's excluded_sym_names).
  std::vector<std::string> excluded_nodes;
  // Static loss scaling (float16's small gradients kept above its underflow): the loss
  // operators' gradients (their grad_scale) multiplied by this; whoever updates the weights
  // divides it out again (train::Module divides rescale_grad). 1: none.
  double loss_scale = 1;
  // Dynamic loss scaling instead: a _amp_loss_scale node before each loss operator multiplies
  // its gradient by the scale in the auxiliary state kAmpLossScale, shared by all of them,
  // which the optimizer's fused update adjusts (kvstore/fused_update.h).
  bool dynamic_loss_scale = false;
};

// The auxiliary state that holds a dynamic loss scale.
inline constexpr char kAmpLossScale[] = "amp_loss_scale";

// The operators that always compute in float32 under mixed precision.
const std::vector<std::string>& AmpFloat32Ops();
// The operators that compute in the low type.
const std::vector<std::string>& AmpLowPrecisionOps();
// The loss operators, whose grad_scale AmpOptions::loss_scale multiplies.
const std::vector<std::string>& AmpLossOps();

// `symbol` with amp_cast nodes inserted as above. `input_types` gives variables' types
// (default: their __dtype__ attribute, else float32). INVALID_ARGUMENT for a dtype that is
// not float16 / bfloat16, a loss_scale that is not a positive finite number, an excluded
// node the graph lacks, or a type the graph cannot run (naming the node).
absl::StatusOr<Symbol> ConvertToMixedPrecision(const Symbol& symbol, const AmpOptions& options,
                                               const std::map<std::string, DType>& input_types = {});

// The number of amp_cast nodes in `symbol` (what a converted graph added).
int CountAmpCasts(const Symbol& symbol);

}  // namespace tessera::graph

#endif  // TESSERA_GRAPH_AMP_H_

// The library behind `tessera graph inspect` and `tessera graph run`, so both are tested
// in-process; client/tessera_main.cc only parses flags and prints.
#ifndef TESSERA_CLIENT_GRAPH_COMMANDS_H_
#define TESSERA_CLIENT_GRAPH_COMMANDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/shape.h"
#include "graph/symbol.h"
#include "ndarray/runtime.h"

namespace tessera::client {

// "data=1,1,28,28" -> {"data", (1,1,28,28)}; INVALID_ARGUMENT naming the flag text.
absl::StatusOr<std::pair<std::string, Shape>> ParseShapeFlag(absl::string_view flag);
// "data=x.npy" -> {"data", "x.npy"}.
absl::StatusOr<std::pair<std::string, std::string>> ParseNamedPathFlag(absl::string_view flag);

// The arguments, auxiliary states and outputs of `symbol` with the shapes inference finds
// from `shapes` ("?" where unknown), and the number of parameters: the elements of every
// argument not given a shape and not a label (names ending in "label"), and of the
// auxiliary states, counted apart.
absl::StatusOr<std::string> InspectGraph(const graph::Symbol& symbol,
                                         const std::map<std::string, Shape>& shapes);

struct RunGraphOptions {
  std::map<std::string, std::string> inputs;  // argument name -> .npy path
  // A parameter file, Tessera's or MXNet's (ndarray/params_file.h), keys "arg:NAME" and
  // "aux:NAME" as MXNet checkpoints name them, or plain "NAME". Empty: initialize every
  // parameter from `seed` (Xavier-uniform weights, zero biases and betas and moving
  // means, unit gammas and moving variances, as MXNet's defaults).
  std::string params_path;
  uint64_t seed = 0;
  std::string output_dir;  // created if missing
  Context device = Context::CPU();  // where the graph is bound and runs
  // Mixed precision (graph/amp.h): the graph converted to this type (kFloat16, kBFloat16)
  // before it runs; outputs of a 16-bit type are written as float32. kUnknown: as it is.
  DType amp = DType::kUnknown;
};

// Runs the forward pass (inference mode) of `symbol` on the inputs and writes each output
// to OUTPUT_DIR/<output name>.npy. Labels not given are zeros. Returns the paths written.
// Errors name the input, parameter or file at fault; a parameter missing from the params
// file is INVALID_ARGUMENT naming it.
absl::StatusOr<std::vector<std::string>> RunGraph(const Runtime& rt, const graph::Symbol& symbol,
                                                  const RunGraphOptions& options);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_GRAPH_COMMANDS_H_

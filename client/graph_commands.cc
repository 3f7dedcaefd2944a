#include "client/graph_commands.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "graph/amp.h"
#include "graph/executor.h"
#include "ndarray/arithmetic.h"
#include "ndarray/params_file.h"
#include "ndarray/serialization.h"
#include "train/initializer.h"

namespace tessera::client {
namespace {

bool IsLabel(const std::string& name) { return absl::EndsWith(name, "label"); }

std::string ShapeText(const Shape& s) { return s.ndim() == 0 ? "?" : s.ToString(); }

}  // namespace

absl::StatusOr<std::pair<std::string, Shape>> ParseShapeFlag(absl::string_view flag) {
  std::pair<std::string, std::string> parts = absl::StrSplit(flag, absl::MaxSplits('=', 1));
  Shape shape;
  bool ok = !parts.first.empty() && !parts.second.empty();
  for (absl::string_view dim : absl::StrSplit(parts.second, ',')) {
    int64_t d = 0;
    ok = ok && absl::SimpleAtoi(dim, &d) && d > 0;
    shape.push_back(d);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shape '", flag, "': expected NAME=D1,D2,... with positive dimensions"));
  }
  return std::make_pair(parts.first, shape);
}

absl::StatusOr<std::pair<std::string, std::string>> ParseNamedPathFlag(absl::string_view flag) {
  std::pair<std::string, std::string> parts = absl::StrSplit(flag, absl::MaxSplits('=', 1));
  if (parts.first.empty() || parts.second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--input '", flag, "': expected NAME=FILE.npy"));
  }
  return parts;
}

absl::StatusOr<std::string> InspectGraph(const graph::Symbol& symbol,
                                         const std::map<std::string, Shape>& shapes) {
  ASSIGN_OR_RETURN(graph::InferResult<Shape> inferred, symbol.InferShape(shapes));
  const std::vector<std::string> args = symbol.ListArguments();
  const std::vector<std::string> aux = symbol.ListAuxiliaryStates();
  const std::vector<std::string> outs = symbol.ListOutputs();
  size_t width = 8;
  for (const auto* list : {&args, &aux, &outs}) {
    for (const std::string& n : *list) width = std::max(width, n.size());
  }
  std::string text;
  int64_t params = 0, aux_params = 0;
  bool all_known = true;
  const auto row = [&](const std::string& name, const Shape& s, const std::string& note) {
    std::string line = absl::StrFormat("  %-*s  %-18s %s", width, name, ShapeText(s), note);
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&text, line, "\n");
  };
  text += "arguments:\n";
  for (size_t i = 0; i < args.size(); ++i) {
    const bool input = shapes.contains(args[i]) || IsLabel(args[i]);
    const Shape& s = inferred.arguments[i];
    if (!input && s.is_known()) params += s.Size();
    all_known = all_known && (input || s.is_known());
    row(args[i], s, input ? "input" : (s.is_known() ? absl::StrCat(s.Size()) : ""));
  }
  text += "auxiliary states:\n";
  for (size_t i = 0; i < aux.size(); ++i) {
    const Shape& s = inferred.aux_states[i];
    if (s.is_known()) aux_params += s.Size();
    all_known = all_known && s.is_known();
    row(aux[i], s, s.is_known() ? absl::StrCat(s.Size()) : "");
  }
  if (aux.empty()) text += "  (none)\n";
  text += "outputs:\n";
  for (size_t i = 0; i < outs.size(); ++i) row(outs[i], inferred.outputs[i], "");
  absl::StrAppend(&text, "parameters: ", params, all_known ? "" : " (some shapes unknown: give --shape)",
                  "\nauxiliary state elements: ", aux_params, "\n");
  return text;
}

absl::StatusOr<std::vector<std::string>> RunGraph(const Runtime& rt, const graph::Symbol& given,
                                                  const RunGraphOptions& options) {
  graph::Symbol symbol = given;
  if (options.amp != DType::kUnknown) {
    absl::StatusOr<graph::Symbol> converted = graph::ConvertToMixedPrecision(given, {.dtype = options.amp});
    if (!converted.ok()) return Annotate(converted.status(), "--amp");
    symbol = *std::move(converted);
  }
  if (options.params_path.empty()) {
    RETURN_IF_ERROR(Annotate(rt.resources->SeedRandom(options.seed), "--seed"));
  }
  std::map<std::string, NDArray> inputs;
  std::map<std::string, Shape> shapes;
  for (const auto& [name, path] : options.inputs) {
    ASSIGN_OR_RETURN(NDArray array, LoadNpy(rt, path));
    shapes[name] = array.shape();
    inputs[name] = std::move(array);
  }
  std::map<std::string, NDArray> params;
  if (!options.params_path.empty()) {
    using ArrayMap = std::map<std::string, NDArray>;
    ASSIGN_OR_RETURN(ArrayMap file, LoadParamsFile(rt, options.params_path));
    for (auto& [key, array] : file) {
      std::string name = key;
      if (absl::StartsWith(name, "arg:") || absl::StartsWith(name, "aux:")) name = name.substr(4);
      params[name] = std::move(array);
    }
  }
  graph::SimpleBindOptions bind{.shapes = shapes, .grad_req = OpReqType::kNullOp};
  for (const auto& [name, array] : inputs) bind.dtypes[name] = array.dtype();
  for (const auto& [name, array] : params) {
    bind.shapes.try_emplace(name, array.shape());
  }
  // Only names the symbol has may seed inference.
  const std::vector<std::string> args = symbol.ListArguments(), aux = symbol.ListAuxiliaryStates();
  for (auto it = bind.shapes.begin(); it != bind.shapes.end();) {
    const bool known = std::find(args.begin(), args.end(), it->first) != args.end() ||
                       std::find(aux.begin(), aux.end(), it->first) != aux.end();
    if (!known && inputs.contains(it->first)) {
      return absl::InvalidArgumentError(absl::StrCat("--input '", it->first, "': the graph has no such argument"));
    }
    it = known ? std::next(it) : bind.shapes.erase(it);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec,
                   graph::Executor::SimpleBind(rt, symbol, options.device, bind));
  const auto fill = [&](const std::map<std::string, NDArray>& bound) -> absl::Status {
    for (const auto& [name, array] : bound) {
      if (auto in = inputs.find(name); in != inputs.end()) {
        RETURN_IF_ERROR(CopyFromTo(in->second, array));
      } else if (IsLabel(name)) {
        RETURN_IF_ERROR(Fill(array, 0.0));
      } else if (auto p = params.find(name); p != params.end()) {
        if (p->second.shape() != array.shape()) {
          return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' in ", options.params_path, " is ",
                                                         p->second.shape().ToString(), ", the graph needs ",
                                                         array.shape().ToString()));
        }
        RETURN_IF_ERROR(CopyFromTo(p->second, array));
      } else if (!options.params_path.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is not in ", options.params_path));
      } else {
        RETURN_IF_ERROR(train::Xavier()(name, array));
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(fill(exec->arg_dict()));
  RETURN_IF_ERROR(fill(exec->aux_dict()));
  RETURN_IF_ERROR(exec->Forward(/*is_train=*/false));
  std::error_code ec;
  std::filesystem::create_directories(options.output_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("--output '", options.output_dir, "': ", ec.message()));
  }
  std::vector<std::string> written;
  const std::vector<std::string> names = symbol.ListOutputs();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = (std::filesystem::path(options.output_dir) / (names[i] + ".npy")).string();
    ASSIGN_OR_RETURN(NDArray host, CopyTo(exec->outputs()[i], Context::CPU()));
    if (host.dtype() == DType::kFloat16 || host.dtype() == DType::kBFloat16) {
      ASSIGN_OR_RETURN(host, Cast(host, DType::kFloat32));
    }
    RETURN_IF_ERROR(SaveNpy(path, host));
    written.push_back(path);
  }
  return written;
}

}  // namespace tessera::client

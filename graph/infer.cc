#include "graph/infer.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera::graph {
namespace {

bool IsKnown(const Shape& s) { return s.is_known(); }
bool IsKnown(DType t) { return t != DType::kUnknown; }

// Merges what an operator inferred into the entry; true when the entry learned something.
bool Update(const Shape& inferred, Shape* entry) {
  if (inferred.ndim() == 0 || inferred == *entry) return false;
  if (entry->ndim() == inferred.ndim()) {
    bool changed = false;
    for (int i = 0; i < inferred.ndim(); ++i) {
      if ((*entry)[i] == 0 && inferred[i] != 0) {
        (*entry)[i] = inferred[i];
        changed = true;
      }
    }
    return changed;
  }
  if (entry->ndim() == 0) {
    *entry = inferred;
    return true;
  }
  return false;  // a rank conflict: the operator has already reported it
}
bool Update(DType inferred, DType* entry) {
  if (inferred == DType::kUnknown || *entry != DType::kUnknown) return false;
  *entry = inferred;
  return true;
}

absl::Status NodeError(const Node& node, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("node '", node.name, "' (", node.OpName(), "): ", status.message()));
}

absl::StatusOr<bool> CallInfer(const ops::OperatorProperty& op, std::vector<Shape>* in,
                               std::vector<Shape>* out, std::vector<Shape>* aux) {
  return op.InferShape(in, out, aux);
}
absl::StatusOr<bool> CallInfer(const ops::OperatorProperty& op, std::vector<DType>* in,
                               std::vector<DType>* out, std::vector<DType>* aux) {
  return op.InferType(in, out, aux);
}

template <typename T>
absl::Status Infer(const IndexedGraph& graph, std::vector<T>* values) {
  // Each sweep either learns something or stops; a value is learned at most once per
  // entry dimension, so the number of sweeps is bounded.
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t id = 0; id < graph.num_nodes(); ++id) {
      const Node& node = graph.node(id);
      if (node.is_variable()) continue;
      const std::vector<uint32_t>& inputs = graph.inputs(id);
      const size_t num_args = node.num_arguments();
      std::vector<T> in, out, aux;
      for (size_t i = 0; i < inputs.size(); ++i) {
        (i < num_args ? in : aux).push_back((*values)[inputs[i]]);
      }
      for (int i = 0; i < node.num_outputs(); ++i) out.push_back((*values)[graph.entry_id(id, i)]);
      bool all_known = true;
      for (const std::vector<T>* list : {&in, &out, &aux}) {
        for (const T& v : *list) all_known = all_known && IsKnown(v);
      }
      if (all_known) continue;
      absl::StatusOr<bool> done = CallInfer(*node.op, &in, &out, &aux);
      if (!done.ok()) return NodeError(node, done.status());
      for (size_t i = 0; i < inputs.size(); ++i) {
        changed |= Update(i < num_args ? in[i] : aux[i - num_args], &(*values)[inputs[i]]);
      }
      for (int i = 0; i < node.num_outputs(); ++i) {
        changed |= Update(out[i], &(*values)[graph.entry_id(id, i)]);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InferShapes(const IndexedGraph& graph, std::vector<Shape>* shapes) {
  return Infer(graph, shapes);
}

absl::Status InferTypes(const IndexedGraph& graph, std::vector<DType>* types) {
  return Infer(graph, types);
}

absl::StatusOr<Shape> ShapeAttr(const Node& node) {
  auto it = node.attrs.find("__shape__");
  if (it == node.attrs.end()) return Shape();
  absl::StatusOr<Shape> shape = Shape::Parse(it->second);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", node.name, "': attribute __shape__='",
                                                   it->second, "': ", shape.status().message()));
  }
  return shape;
}

absl::StatusOr<DType> DTypeAttr(const Node& node) {
  auto it = node.attrs.find("__dtype__");
  if (it == node.attrs.end()) return DType::kUnknown;
  int code = 0;
  if (absl::SimpleAtoi(it->second, &code)) {  // MXNet writes the type code
    if (IsValidDType(code)) return static_cast<DType>(code);
  } else if (absl::StatusOr<DType> named = ParseDType(it->second); named.ok()) {
    return *named;
  }
  return absl::InvalidArgumentError(absl::StrCat("variable '", node.name,
                                                 "': attribute __dtype__='", it->second,
                                                 "' is not a type code or dtype name"));
}

}  // namespace tessera::graph

#include "graph/node.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera::graph {

std::string Node::OutputName(uint32_t index) const {
  if (is_variable()) return name;
  return absl::StrCat(name, "_", op->ListOutputs()[index]);
}

std::string Node::OpName() const { return is_variable() ? "null" : op->TypeString(); }

std::string AttrKey(const std::string& key) {
  // ">= 4": "____" is the wrapped empty key; with "> 4" it grew by "____" at every load.
  if (key.size() >= 4 && absl::StartsWith(key, "__") && absl::EndsWith(key, "__")) return key;
  return absl::StrCat("__", key, "__");
}

}  // namespace tessera::graph

// The operator registry as JSON, for language bindings (`tessera ops --json`, the C API in
// capi/): what DescribeOperators (registry.h) prints for people, as data.
#ifndef TESSERA_OPS_REGISTRY_JSON_H_
#define TESSERA_OPS_REGISTRY_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::ops {

// An array with, per operator (sorted by name, or only the one named; NOT_FOUND when there
// is none): "name", "description", "arguments", "outputs", "aux_states" (those of the
// default parameters), "gpu" (a GPU kernel is built in), "variadic" (the parameter that
// counts positional inputs, MXNet's key_var_num_args: "num_args", or null) and "params"
// (objects with "name", "type", "default" (null when required), "required", "description").
absl::StatusOr<std::string> DescribeOperatorsJson(absl::string_view only = "");

}  // namespace tessera::ops

#endif  // TESSERA_OPS_REGISTRY_JSON_H_

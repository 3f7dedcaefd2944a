// Small helpers for the array operator tests: creating an OpChecker that must succeed, and
// running a property's shape inference by operator name.
#ifndef TESSERA_TESTS_OPS_ARRAY_ARRAY_TEST_UTIL_H_
#define TESSERA_TESTS_OPS_ARRAY_ARRAY_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "ops/registry.h"
#include "tests/ops/op_check.h"

namespace tessera::ops::testing {

// An OpChecker, or null with a test failure saying why.
inline std::unique_ptr<OpChecker> MakeChecker(const std::string& op, const KwArgs& kwargs,
                                              const std::vector<Shape>& in_shapes,
                                              DType dtype = DType::kFloat64, uint64_t seed = 1) {
  absl::StatusOr<std::unique_ptr<OpChecker>> c =
      OpChecker::Create(op, kwargs, in_shapes, dtype, seed);
  if (!c.ok()) {
    ADD_FAILURE() << "OpChecker::Create(" << op << "): " << c.status();
    return nullptr;
  }
  return *std::move(c);
}

// Runs `op`'s InferShape on `in` / `out` (resized to the property's lists).
inline absl::StatusOr<bool> InferShapes(const std::string& op, const KwArgs& kwargs,
                                        std::vector<Shape>* in, std::vector<Shape>* out) {
  ASSIGN_OR_RETURN(std::unique_ptr<OperatorProperty> prop, OpRegistry::Global().Create(op, kwargs));
  in->resize(prop->ListArguments().size());
  out->resize(prop->NumOutputs());
  std::vector<Shape> aux(prop->ListAuxiliaryStates().size());
  return prop->InferShape(in, out, &aux);
}

// Row-major strides of `s`.
inline std::vector<int64_t> StridesOf(const Shape& s) {
  std::vector<int64_t> st(s.ndim(), 1);
  for (int i = s.ndim() - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

}  // namespace tessera::ops::testing

#endif  // TESSERA_TESTS_OPS_ARRAY_ARRAY_TEST_UTIL_H_

// Helpers shared by the tensor operator tests: float64 reference loops for broadcasting and
// for reductions, and a shorthand to create a checker.
#ifndef TESSERA_TESTS_OPS_TENSOR_TEST_UTIL_H_
#define TESSERA_TESTS_OPS_TENSOR_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "core/shape.h"
#include "gtest/gtest.h"
#include "tests/ops/op_check.h"

namespace tessera::ops::testing {

// Offset in `other` (right-aligned, broadcast dims index 0) of flat element `flat` of `out`.
inline int64_t BroadcastOffset(const Shape& out, int64_t flat, const Shape& other) {
  int64_t off = 0, stride = 1;
  for (int d = out.ndim() - 1; d >= 0; --d) {
    const int64_t i = flat % out[d];
    flat /= out[d];
    const int od = other.ndim() - out.ndim() + d;
    if (od >= 0) {
      if (other[od] != 1) off += i * stride;
      stride *= other[od];
    }
  }
  return off;
}

// Creates a checker or fails the test.
inline std::unique_ptr<OpChecker> MakeChecker(const std::string& op, const KwArgs& kwargs,
                                              const std::vector<Shape>& shapes, DType dtype,
                                              uint64_t seed = 1) {
  auto c = OpChecker::Create(op, kwargs, shapes, dtype, seed);
  EXPECT_TRUE(c.ok()) << op << ": " << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

}  // namespace tessera::ops::testing

#endif  // TESSERA_TESTS_OPS_TENSOR_TEST_UTIL_H_

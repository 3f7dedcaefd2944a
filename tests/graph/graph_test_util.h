// Shared helpers for the executor tests: random argument values and the scalar objective
// sum(output * head_grad) whose gradient Backward(head_grads) computes.
#ifndef TESSERA_TESTS_GRAPH_GRAPH_TEST_UTIL_H_
#define TESSERA_TESTS_GRAPH_GRAPH_TEST_UTIL_H_

#include <random>
#include <vector>

#include "core/check.h"
#include "graph/executor.h"
#include "ndarray/ndarray.h"

namespace tessera::graph::testing {

inline std::vector<float> RandomValues(int64_t n, std::mt19937* rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

inline void SetRandom(const NDArray& array, std::mt19937* rng, float scale = 1.0f) {
  std::vector<float> v = RandomValues(array.Size(), rng, scale);
  NDArray target = array;  // shares the chunk; SyncCopyFromCPU is a non-const member
  TESSERA_CHECK(target.SyncCopyFromCPU(v.data(), array.Size()).ok());
}

inline std::vector<float> Values(const NDArray& array) {
  auto v = array.AsVector<float>();
  TESSERA_CHECK(v.ok());
  return *v;
}

// sum over outputs k of sum(outputs[k] * head_grads[k]), accumulated in double.
inline double Objective(const std::vector<NDArray>& outputs, const std::vector<std::vector<float>>& head_grads) {
  double j = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::vector<float> out = Values(outputs[k]);
    for (size_t i = 0; i < out.size(); ++i) j += static_cast<double>(out[i]) * head_grads[k][i];
  }
  return j;
}

}  // namespace tessera::graph::testing

#endif  // TESSERA_TESTS_GRAPH_GRAPH_TEST_UTIL_H_

// OpChecker: drives one registered operator on plain host buffers, for the operator tests.
//
// It infers shapes and types through the property, creates the operator on cpu(0), and runs
// Forward/Backward directly (no engine push: tests call kernels synchronously; resources come
// from a real ResourceManager). Inputs start random in [-1, -0.1] U [0.1, 1] (never zero, never
// near a kink at 0), set them with SetInput for labels, indices or positive-only inputs.
//
// Checks:
//  - CheckForward(ref): outputs against a float64 reference for every OpReqType: kWriteTo
//    (outputs pre-filled with NaN so a kernel that reads them fails), kAddTo (pre-filled with
//    random values that must be added to), kNullOp (must stay untouched) and, for each
//    ForwardInplaceOption pair, kWriteInplace with the output aliasing the input.
//  - CheckBackward(): in_grad against central finite differences of
//    loss = sum_o sum_i out_grad[o][i] * out[o][i], for kWriteTo, kAddTo and each
//    BackwardInplaceOption pair. Runs in the checker's dtype (float64 where the op has a
//    float64 kernel gives tight checks; oneDNN ops run float32 with a wider tolerance).
//  - Backward(): the raw gradients, for loss operators whose backward ignores out_grad.
#ifndef TESSERA_TESTS_OPS_OP_CHECK_H_
#define TESSERA_TESTS_OPS_OP_CHECK_H_

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "ndarray/runtime.h"
#include "ops/operator.h"
#include "ops/param.h"

namespace tessera::ops::testing {

using Values = std::vector<double>;
// A float64 reference: the inputs (one vector per argument, row-major, with their shapes)
// to the visible outputs. Aux states are passed after the arguments.
using ReferenceFn =
    std::function<std::vector<Values>(const std::vector<Values>& in, const std::vector<Shape>& shapes)>;

struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-6;
};

class OpChecker {
 public:
  // Errors: unknown op, bad kwargs, failed or incomplete shape/type inference.
  static absl::StatusOr<std::unique_ptr<OpChecker>> Create(const std::string& op,
                                                           const KwArgs& kwargs,
                                                           const std::vector<Shape>& in_shapes,
                                                           DType dtype = DType::kFloat32,
                                                           uint64_t seed = 1);

  const OperatorProperty& prop() const { return *prop_; }
  const std::vector<Shape>& in_shapes() const { return in_shapes_; }
  const std::vector<Shape>& out_shapes() const { return out_shapes_; }
  const std::vector<Shape>& aux_shapes() const { return aux_shapes_; }
  std::mt19937_64& rng() { return rng_; }

  void SetInput(int i, Values values) { inputs_.at(i) = std::move(values); }
  const Values& input(int i) const { return inputs_.at(i); }
  void SetAux(int i, Values values) { aux_.at(i) = std::move(values); }
  const Values& aux(int i) const { return aux_.at(i); }
  // Excludes argument i from gradient checks (labels, indices).
  void SkipGradient(int i) { skip_grad_.push_back(i); }
  // RunContext::cpu_threads of the calls from now on (1 by default).
  void set_cpu_threads(int threads) { cpu_threads_ = threads; }
  // Runs `check` with cpu_threads 1, 2, 4, 1, 2 in turn (traced): an operator that keeps
  // primitives per thread count must compute the same on each, also when it goes back to one.
  void ForEachThreadCount(const std::function<void()>& check);

  // Runs Forward once with kWriteTo on every output; aux states are updated in place.
  absl::StatusOr<std::vector<Values>> Forward(bool is_train = true);
  // Runs Forward (is_train) then Backward with these out_grads (one per visible output) and
  // kWriteTo on every input gradient.
  absl::StatusOr<std::vector<Values>> Backward(const std::vector<Values>& out_grads);

  // gtest assertions, see the header comment. `ref` computes the visible outputs.
  void CheckForward(const ReferenceFn& ref, Tolerance tol = {}, bool is_train = true);
  void CheckBackward(Tolerance tol = {.rtol = 1e-4, .atol = 1e-6}, double eps = 0);

 private:
  OpChecker() = default;
  struct Buffers;
  // Runs forward with the given req on every output; `outputs` are pre-filled as wanted.
  absl::Status RunForward(bool is_train, OpReqType req, std::vector<Values>* outputs,
                          int inplace_in = -1, int inplace_out = -1);
  absl::Status RunBackward(const std::vector<Values>& out_grads, OpReqType req,
                           std::vector<Values>* in_grads, int inplace_ograd = -1,
                           int inplace_igrad = -1);
  double Loss(const std::vector<Values>& out_grads);

  std::unique_ptr<OwnedRuntime> runtime_;
  std::unique_ptr<OperatorProperty> prop_;
  std::unique_ptr<Operator> op_;
  DType dtype_ = DType::kFloat32;
  std::vector<Shape> in_shapes_, out_shapes_, aux_shapes_;
  std::vector<Values> inputs_, aux_;
  std::vector<Values> last_outputs_;  // every output (hidden ones too) of the last forward
  std::vector<int> skip_grad_;
  int cpu_threads_ = 1;
  std::mt19937_64 rng_;
};

// Random values in [-1, -0.1] U [0.1, 1].
Values RandomValues(int64_t n, std::mt19937_64& rng);

}  // namespace tessera::ops::testing

#endif  // TESSERA_TESTS_OPS_OP_CHECK_H_

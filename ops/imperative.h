// Imperative invocation: runs any registered operator on NDArrays - how every operator
// (OperatorProperty or SimpleOp) is also an NDArray function, as the seeds' "unifying
// NDArray and symbolic operators" asks.
//
//   ASSIGN_OR_RETURN(std::vector<NDArray> out,
//                    ops::Invoke("smooth_l1", {{"scalar", "1"}}, {x}));
//
// Inputs are the operator's arguments followed by its auxiliary states (which the call
// mutates, e.g. BatchNorm's moving statistics in training mode). Shapes and types are
// inferred, outputs allocated on the inputs' device, and the forward pass pushed to the
// engine; the call returns at once. Misuse (unknown op, bad parameters, wrong number of
// inputs, mixed devices, inconsistent shapes or dtypes) is returned before anything is
// pushed, naming the operator and the argument; a failing kernel is stored on the outputs'
// variables and surfaces at their next wait.
//
// Thread-safe: each call creates its own Operator.
#ifndef TESSERA_OPS_IMPERATIVE_H_
#define TESSERA_OPS_IMPERATIVE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ndarray/ndarray.h"
#include "ops/param.h"

namespace tessera::ops {

struct InvokeOptions {
  bool is_train = false;  // OpContext::is_train (Dropout, BatchNorm)
  int priority = 0;       // engine priority of the push
};

// The visible outputs of `op` applied to `inputs`.
absl::StatusOr<std::vector<NDArray>> Invoke(absl::string_view op, const KwArgs& kwargs,
                                            const std::vector<NDArray>& inputs,
                                            const InvokeOptions& options = {});

// The same into existing arrays: `outputs` holds one array per visible output, of the
// inferred shape, dtype and device, written according to `req` (kWriteTo, or kAddTo to
// accumulate). Hidden outputs get temporaries.
absl::Status InvokeInto(absl::string_view op, const KwArgs& kwargs,
                        const std::vector<NDArray>& inputs, const std::vector<NDArray>& outputs,
                        OpReqType req = OpReqType::kWriteTo, const InvokeOptions& options = {});

}  // namespace tessera::ops

#endif  // TESSERA_OPS_IMPERATIVE_H_

// ElementWiseSum (and its alias add_n, whose property reports the same TypeString) on the
// GPU, every dtype: out = arg0 + arg1 + ... summed per element in AccType (float for the half
// types), in argument order as the CPU does. The input pointers ride in the kernel's
// parameters, kMaxSumInputs per launch; a longer sum continues in further launches that add
// the next inputs to the partial sum in `out` (SumMode::kChain), so no device memory is
// needed for the pointer list. For float16 / bfloat16 with more than kMaxSumInputs inputs,
// that partial sum is rounded to the type between launches: one extra rounding per 16 inputs
// compared with the CPU, which sums all in float.
//
// The backward hands out_grad to every argument (a copy per req; the in-place one, in_grad[0]
// sharing out_grad's memory, is skipped), as the gradient pass does when it sums gradients.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/array_ops_util.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

constexpr char kName[] = "ElementWiseSum";

class ElementWiseSumGpuOp : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    const TBlob& out = out_data[0];
    if (in.empty()) return absl::InvalidArgumentError(absl::StrCat(kName, ": no arguments"));
    for (const TBlob& b : in) {
      if (b.Size() != out.Size()) {
        return absl::InternalError(absl::StrCat(kName, ": argument of shape ", b.shape.ToString(),
                                                " for an output of shape ", out.shape.ToString()));
      }
      RETURN_IF_ERROR(CheckBlobs(kName, {&b}, out.dtype));
    }
    RETURN_IF_ERROR(CheckBlobs(kName, {&out}, out.dtype));
    // One argument: a plain copy (nothing at all in place).
    if (in.size() == 1) return CopyBlob(kName, in[0], out, req[0], StreamOf(ctx));
    ASSIGN_OR_RETURN(ArrayType type, ArrayTypeOf(kName, out.dtype));
    for (size_t start = 0; start < in.size(); start += kMaxSumInputs) {
      SumInputs chunk;
      chunk.n = static_cast<int>(std::min<size_t>(kMaxSumInputs, in.size() - start));
      for (int j = 0; j < chunk.n; ++j) chunk.in[j] = in[start + j].dptr;
      // The first launch applies req (out may be arg0 itself: each element's inputs are read
      // before it is written); later ones add their inputs to what the first one stored.
      const SumMode mode = start == 0 ? SumMode::kStore : SumMode::kChain;
      CUDA_RETURN_IF_ERROR(LaunchSum(type, chunk, out.dptr, out.Size(), mode,
                                     static_cast<int>(req[0]), StreamOf(ctx)));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    // In argument order: the in-place copy (in_grad[0] == out_grad) is skipped and never
    // changes out_grad, so the later copies read the original.
    for (size_t i = 0; i < in_grad.size(); ++i) {
      RETURN_IF_ERROR(CopyBlob(kName, out_grad[0], in_grad[i], req[i], StreamOf(ctx)));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Operator>> CreateElementWiseSum(const OperatorProperty&, Context) {
  return std::unique_ptr<Operator>(new ElementWiseSumGpuOp());
}

const bool kRegistered = [] {
  RegisterGpuOperator("ElementWiseSum", CreateElementWiseSum);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

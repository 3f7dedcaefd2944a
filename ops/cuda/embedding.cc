// Embedding on the GPU: the forward gathers weight rows by index (out[i, :] per req =
// weight[data[i], :]), the backward scatter-adds out_grad rows into the weight gradient with
// atomics (repeated indices sum) and writes a zero gradient for the indices. Weight, output
// and gradients are float32, float64, float16 or bfloat16 (the CPU's float types); the
// indices any dtype, converted as the CPU does (truncation toward zero of the value).
//
// Out-of-range indices: the CPU operator checks every index first and fails with
// INVALID_ARGUMENT. A kernel cannot return an error and the host must not read the indices
// back inside Forward, so the GPU clamps instead, as MXNet's GPU kernel does: a negative or
// NaN index reads (and its gradient goes to) row 0, one >= input_dim the last row.
//
// Gradient accumulation: float32 / float64 add atomically straight into the gradient (zeroed
// first for a write); float16 / bfloat16 sum in a float32 scratch buffer (Workspace) which a
// last kernel rounds into the gradient per req, as the CPU sums in float before storing. The
// order of the atomic additions varies from run to run, so float results may differ from
// the CPU's in the last bits.
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

constexpr char kName[] = "Embedding";

class EmbeddingGpuOp : public Operator {
 public:
  EmbeddingGpuOp(int64_t input_dim, int64_t output_dim)
      : input_dim_(input_dim), output_dim_(output_dim) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    const TBlob& data = in[0];
    const TBlob& weight = in[1];
    ASSIGN_OR_RETURN(ArrayType type, FloatArrayTypeOf(kName, weight.dtype));
    ASSIGN_OR_RETURN(ArrayType index_type, ArrayTypeOf(kName, data.dtype));
    RETURN_IF_ERROR(CheckBlobs(kName, {&data}, data.dtype));
    RETURN_IF_ERROR(CheckBlobs(kName, {&weight, &out[0]}, weight.dtype));
    RETURN_IF_ERROR(CheckSizes(data, weight, out[0], "output"));
    CUDA_RETURN_IF_ERROR(LaunchEmbeddingGather(type, index_type, data.dptr, data.Size(),
                                               weight.dptr, input_dim_, output_dim_, out[0].dptr,
                                               static_cast<int>(req[0]), StreamOf(ctx)));
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    const cudaStream_t stream = StreamOf(ctx);
    // Indices are not differentiable.
    RETURN_IF_ERROR(ZeroBlob(kName, in_grad[0], req[0], stream));
    if (req[1] == OpReqType::kNullOp) return absl::OkStatus();
    const TBlob& data = in_data[0];
    const TBlob& grad = in_grad[1];
    ASSIGN_OR_RETURN(ArrayType type, FloatArrayTypeOf(kName, grad.dtype));
    ASSIGN_OR_RETURN(ArrayType index_type, ArrayTypeOf(kName, data.dtype));
    RETURN_IF_ERROR(CheckBlobs(kName, {&data}, data.dtype));
    RETURN_IF_ERROR(CheckBlobs(kName, {&grad, &out_grad[0]}, grad.dtype));
    RETURN_IF_ERROR(CheckSizes(data, grad, out_grad[0], "out_grad"));
    const int64_t n = grad.Size();
    const int req1 = static_cast<int>(req[1]);
    if (type == ArrayType::kFloat32 || type == ArrayType::kFloat64) {
      CUDA_RETURN_IF_ERROR(LaunchZero(type, grad.dptr, n, req1, stream));
      CUDA_RETURN_IF_ERROR(LaunchEmbeddingScatterAdd(type, index_type, data.dptr, data.Size(),
                                                     out_grad[0].dptr, input_dim_, output_dim_,
                                                     grad.dptr, stream));
      return absl::OkStatus();
    }
    Workspace workspace(ctx);
    ASSIGN_OR_RETURN(void* acc, workspace.Get(static_cast<size_t>(n) * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(acc, 0, static_cast<size_t>(n) * sizeof(float), stream));
    CUDA_RETURN_IF_ERROR(LaunchEmbeddingScatterAdd(type, index_type, data.dptr, data.Size(),
                                                   out_grad[0].dptr, input_dim_, output_dim_, acc,
                                                   stream));
    CUDA_RETURN_IF_ERROR(
        LaunchEmbeddingFinish(type, static_cast<const float*>(acc), grad.dptr, n, req1, stream));
    return absl::OkStatus();
  }

 private:
  // The kernels index with the parameters: blobs of other sizes would be read or written out
  // of bounds, which the device could not report.
  absl::Status CheckSizes(const TBlob& data, const TBlob& weight, const TBlob& rows,
                          const char* rows_name) const {
    if (weight.Size() != input_dim_ * output_dim_ || rows.Size() != data.Size() * output_dim_) {
      return absl::InternalError(
          absl::StrCat(kName, ": data ", data.shape.ToString(), ", weight ",
                       weight.shape.ToString(), " and ", rows_name, " ", rows.shape.ToString(),
                       " do not fit input_dim=", input_dim_, ", output_dim=", output_dim_));
    }
    return absl::OkStatus();
  }

  int64_t input_dim_;
  int64_t output_dim_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateEmbedding(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  int64_t input_dim = 0, output_dim = 0;
  RETURN_IF_ERROR(r.Read("input_dim", &input_dim));
  RETURN_IF_ERROR(r.Read("output_dim", &output_dim));
  if (input_dim < 1 || output_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": input_dim=", input_dim, " and output_dim=", output_dim, " must be at least 1"));
  }
  return std::unique_ptr<Operator>(new EmbeddingGpuOp(input_dim, output_dim));
}

const bool kRegistered = [] {
  RegisterGpuOperator(kName, CreateEmbedding);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

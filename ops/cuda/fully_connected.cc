// FullyConnected on the GPU with cuBLAS sgemm, as MXNet: out = data * weight^T + bias, with
// data flattened to (batch, features) - (shape[0], rest) under flatten, else (all but the
// last dim, last dim). Row-major blobs are column-major transposes, so each product is
// written for the transposes (comments give the row-major meaning). kAddTo is gemm's beta.
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/cublas_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/cuda/kernels.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

enum { kData, kWeight, kBias };

class FullyConnectedGpuOp : public Operator {
 public:
  FullyConnectedGpuOp(int num_hidden, bool no_bias, bool flatten)
      : num_hidden_(num_hidden), no_bias_(no_bias), flatten_(flatten) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32("FullyConnected", {in.begin(), in.end()}));
    RETURN_IF_ERROR(CheckFloat32("FullyConnected", out));
    const auto [n, k] = Flat(in[kData].shape);
    const int h = num_hidden_;
    ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandle(ctx));
    const float alpha = 1.0f, beta = BetaFor(req[0]);
    // out(n, h) = data(n, k) * weight(h, k)^T.
    CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, h, n, k, &alpha,
                                       Ptr(in[kWeight]), k, Ptr(in[kData]), k, &beta, Ptr(out[0]),
                                       h));
    if (!no_bias_) {
      CUDA_RETURN_IF_ERROR(LaunchAddBiasRows(Ptr(out[0]), Ptr(in[kBias]), n, h, StreamOf(ctx)));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    RETURN_IF_ERROR(CheckFloat32("FullyConnected", {out_grad[0], in[kData], in[kWeight]}));
    const auto [n, k] = Flat(in[kData].shape);
    const int h = num_hidden_;
    ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandle(ctx));
    const float alpha = 1.0f;
    const float* dy = Ptr(out_grad[0]);
    // Bias and weight first: under in-place options nothing aliases them, but the data
    // gradient is the one most likely to share memory with something upstream.
    if (!no_bias_ && req[kBias] != OpReqType::kNullOp) {
      CUDA_RETURN_IF_ERROR(LaunchSumRows(dy, Ptr(in_grad[kBias]), n, h,
                                         static_cast<int>(req[kBias]), StreamOf(ctx)));
    }
    if (req[kWeight] != OpReqType::kNullOp) {
      // dweight(h, k) = dy(n, h)^T * data(n, k).
      const float beta = BetaFor(req[kWeight]);
      CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, k, h, n, &alpha,
                                         Ptr(in[kData]), k, dy, h, &beta, Ptr(in_grad[kWeight]),
                                         k));
    }
    if (req[kData] != OpReqType::kNullOp) {
      // ddata(n, k) = dy(n, h) * weight(h, k).
      const float beta = BetaFor(req[kData]);
      CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, k, n, h, &alpha,
                                         Ptr(in[kWeight]), k, dy, h, &beta, Ptr(in_grad[kData]),
                                         k));
    }
    return absl::OkStatus();
  }

 private:
  static float* Ptr(const TBlob& b) { return static_cast<float*>(b.dptr); }
  std::pair<int, int> Flat(const Shape& s) const {
    if (s.ndim() == 0) return {0, 0};
    if (flatten_) return {static_cast<int>(s[0]), static_cast<int>(s.ProdRange(1, s.ndim()))};
    return {static_cast<int>(s.ProdRange(0, s.ndim() - 1)), static_cast<int>(s[s.ndim() - 1])};
  }

  int num_hidden_;
  bool no_bias_;
  bool flatten_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateFullyConnected(const OperatorProperty& prop,
                                                               Context) {
  ParamReader params(prop);
  int num_hidden = 0;
  bool no_bias = false, flatten = true;
  RETURN_IF_ERROR(params.Read("num_hidden", &num_hidden));
  RETURN_IF_ERROR(params.Read("no_bias", &no_bias));
  RETURN_IF_ERROR(params.Read("flatten", &flatten));
  return std::unique_ptr<Operator>(new FullyConnectedGpuOp(num_hidden, no_bias, flatten));
}

const bool kRegistered = [] {
  RegisterGpuOperator("FullyConnected", CreateFullyConnected);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

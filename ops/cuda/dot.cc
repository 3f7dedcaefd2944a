// dot and batch_dot on cuBLAS (float32), with MXNet's flattening of N-D operands (see
// ops/tensor/dot_ops.cc): lhs is (m, k) - stored (k, m) under transpose_a - and rhs (k, n) -
// stored (n, k) under transpose_b; a 1-D operand is a vector whatever its flag. Every product
// is a row-major GEMM, handed to column-major cuBLAS as the product of the transposes.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/cublas_status.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

// Row-major C(m, n) (per beta) = op(x)(m, k) * op(y)(k, n) for `batch` matrices each, where
// x and y are stored row-major with row lengths ldx and ldy.
absl::Status RowGemm(cublasHandle_t handle, bool tx, bool ty, int m, int n, int k, const float* x,
                     int ldx, const float* y, int ldy, float beta, float* c, int batch,
                     int64_t stride_x, int64_t stride_y, int64_t stride_c) {
  const float alpha = 1.0f;
  CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
      handle, ty ? CUBLAS_OP_T : CUBLAS_OP_N, tx ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, y,
      ldy, stride_y, x, ldx, stride_x, &beta, c, n, stride_c, batch));
  return absl::OkStatus();
}

struct Dims {
  int batch = 1, m = 0, k = 0, n = 0;
  bool ta = false, tb = false;  // after the 1-D rule
  int lda = 0, ldb = 0;         // stored row lengths
};

class DotGpuOp : public Operator {
 public:
  DotGpuOp(bool batched, bool ta, bool tb) : batched_(batched), ta_(ta), tb_(tb) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckFloat32(Name(), {in[0], in[1], out[0]}));
    ASSIGN_OR_RETURN(Dims d, GetDims(in[0].shape, in[1].shape));
    ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandle(ctx));
    return RowGemm(handle, d.ta, d.tb, d.m, d.n, d.k, P(in[0]), d.lda, P(in[1]), d.ldb,
                   BetaFor(req[0]), P(out[0]), d.batch, int64_t{d.m} * d.k, int64_t{d.k} * d.n,
                   int64_t{d.m} * d.n);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    RETURN_IF_ERROR(CheckFloat32(Name(), {out_grad[0], in[0], in[1]}));
    ASSIGN_OR_RETURN(Dims d, GetDims(in[0].shape, in[1].shape));
    ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandle(ctx));
    const float* dc = P(out_grad[0]);
    const int64_t sa = int64_t{d.m} * d.k, sb = int64_t{d.k} * d.n, sc = int64_t{d.m} * d.n;
    if (req[0] != OpReqType::kNullOp) {
      const float beta = BetaFor(req[0]);
      if (!d.ta) {  // da(m, k) = dc(m, n) * op(b)^T
        RETURN_IF_ERROR(RowGemm(handle, false, !d.tb, d.m, d.k, d.n, dc, d.n, P(in[1]), d.ldb, beta,
                                P(in_grad[0]), d.batch, sc, sb, sa));
      } else {  // da(k, m) = op(b)(k, n) * dc^T
        RETURN_IF_ERROR(RowGemm(handle, d.tb, true, d.k, d.m, d.n, P(in[1]), d.ldb, dc, d.n, beta,
                                P(in_grad[0]), d.batch, sb, sc, sa));
      }
    }
    if (req[1] != OpReqType::kNullOp) {
      const float beta = BetaFor(req[1]);
      if (!d.tb) {  // db(k, n) = op(a)^T * dc(m, n)
        RETURN_IF_ERROR(RowGemm(handle, !d.ta, false, d.k, d.n, d.m, P(in[0]), d.lda, dc, d.n, beta,
                                P(in_grad[1]), d.batch, sa, sc, sb));
      } else {  // db(n, k) = dc^T * op(a)(m, k)
        RETURN_IF_ERROR(RowGemm(handle, true, d.ta, d.n, d.k, d.m, dc, d.n, P(in[0]), d.lda, beta,
                                P(in_grad[1]), d.batch, sc, sa, sb));
      }
    }
    return absl::OkStatus();
  }

 private:
  static float* P(const TBlob& b) { return static_cast<float*>(b.dptr); }
  const char* Name() const { return batched_ ? "batch_dot" : "dot"; }

  absl::StatusOr<Dims> GetDims(const Shape& a, const Shape& b) const {
    Dims d;
    d.ta = ta_;
    d.tb = tb_;
    int64_t ra, ca, rb, cb;  // stored 2-D views
    if (batched_) {
      if (a.ndim() != 3 || b.ndim() != 3) {
        return absl::InvalidArgumentError(absl::StrCat("batch_dot: operands must be 3-D, got ",
                                                       a.ToString(), " and ", b.ToString()));
      }
      d.batch = static_cast<int>(a[0]);
      ra = a[1], ca = a[2], rb = b[1], cb = b[2];
    } else {
      if (a.ndim() == 1) {
        d.ta = false;
        ra = 1, ca = a[0];
      } else if (!ta_) {
        ra = a.ProdRange(0, a.ndim() - 1), ca = a[a.ndim() - 1];
      } else {
        ra = a[0], ca = a.ProdRange(1, a.ndim());
      }
      if (b.ndim() == 1) {
        d.tb = false;
        rb = b[0], cb = 1;
      } else if (!tb_) {
        rb = b[0], cb = b.ProdRange(1, b.ndim());
      } else {
        rb = b.ProdRange(0, b.ndim() - 1), cb = b[b.ndim() - 1];
      }
    }
    const int64_t m = d.ta ? ca : ra, k = d.ta ? ra : ca;
    const int64_t kb = d.tb ? cb : rb, n = d.tb ? rb : cb;
    if (k != kb) {
      return absl::InvalidArgumentError(absl::StrCat(Name(), ": inner dimensions differ for ",
                                                     a.ToString(), " and ", b.ToString()));
    }
    for (int64_t v : {m, n, k, ca, cb}) {
      if (v > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(Name(), ": ", a.ToString(), " x ",
                                                       b.ToString(), " is too large for cuBLAS"));
      }
    }
    d.m = static_cast<int>(m), d.n = static_cast<int>(n), d.k = static_cast<int>(k);
    d.lda = static_cast<int>(ca), d.ldb = static_cast<int>(cb);
    return d;
  }

  bool batched_, ta_, tb_;
};

template <bool kBatched>
absl::StatusOr<std::unique_ptr<Operator>> CreateDot(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  bool ta = false, tb = false;
  RETURN_IF_ERROR(r.Read("transpose_a", &ta));
  RETURN_IF_ERROR(r.Read("transpose_b", &tb));
  return std::unique_ptr<Operator>(new DotGpuOp(kBatched, ta, tb));
}

const bool kRegistered = [] {
  RegisterGpuOperator("dot", CreateDot<false>);
  RegisterGpuOperator("batch_dot", CreateDot<true>);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

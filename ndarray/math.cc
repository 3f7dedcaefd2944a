// CPU implementation of the tensor math contract in math.h.
//
// Broadcasting and reductions both start by collapsing the shapes: size-1 dimensions are
// dropped and neighbours that are contiguous together are merged, so same-shape and
// scalar-like operands become one tight inner loop, (N,C)+(C) becomes rows of a tight loop,
// and only truly strided patterns pay for an index odometer (one step per inner row).
#include "ndarray/math.h"

#include <dnnl.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ndarray/internal/half_convert.h"
#include "ndarray/internal/math_scalar.h"

namespace tessera::math {
namespace {

using internal::BinaryFn;
using internal::Convert;
using internal::ReduceAcc;
using internal::ReduceFn;
using internal::WrapAdd;

using Dims = absl::InlinedVector<int64_t, 6>;

// ---- checks -------------------------------------------------------------------------------

absl::Status CheckBlob(const char* fn, const char* name, const TBlob& blob) {
  if (blob.ctx.is_gpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat(fn, ": math kernels run on CPU; got ", blob.ctx.ToString(), " for ", name));
  }
  if (!IsValidDType(static_cast<int>(blob.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": ", name, " has invalid dtype ", static_cast<int>(blob.dtype)));
  }
  if (blob.dptr == nullptr && blob.Size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": ", name, " of shape ", blob.shape.ToString(), " has no data"));
  }
  return absl::OkStatus();
}

absl::Status CheckReq(const char* fn, OpReqType req) {
  switch (req) {
    case OpReqType::kNullOp:
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
    case OpReqType::kAddTo:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(fn, ": invalid OpReqType ", static_cast<int>(req)));
}

absl::Status DTypeMismatch(const char* fn, const TBlob& a, const char* a_name, const TBlob& b,
                           const char* b_name) {
  return absl::InvalidArgumentError(absl::StrCat(fn, ": dtype mismatch: ", a_name, " is ",
                                                 DTypeName(a.dtype), ", ", b_name, " is ",
                                                 DTypeName(b.dtype)));
}

absl::Status UnsupportedDType(const char* fn, DType dtype) {
  return absl::InvalidArgumentError(absl::StrCat(fn, ": unsupported dtype ", DTypeName(dtype)));
}

// ---- stores -------------------------------------------------------------------------------

// Writes one result per OpReqType fixed at compile time, so the loops carry no switch.
// (core's Assign does the same per element; this one also wraps integer kAddTo.)
template <OpReqType kReq, typename T, typename A>
inline void Store(T* out, A value) {
  if constexpr (kReq == OpReqType::kAddTo) {
    *out = static_cast<T>(WrapAdd(static_cast<A>(static_cast<AccType<T>>(*out)), value));
  } else {
    *out = static_cast<T>(value);
  }
}

// Calls f(std::integral_constant<OpReqType, R>) for the req; nothing for kNullOp.
template <typename F>
void DispatchReq(OpReqType req, F&& f) {
  switch (req) {
    case OpReqType::kNullOp:
      break;
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      f(std::integral_constant<OpReqType, OpReqType::kWriteTo>());
      break;
    case OpReqType::kAddTo:
      f(std::integral_constant<OpReqType, OpReqType::kAddTo>());
      break;
  }
}

template <typename F>
void DispatchBinaryOp(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::kAdd:
      f(BinaryFn<BinaryOp::kAdd>());
      break;
    case BinaryOp::kSub:
      f(BinaryFn<BinaryOp::kSub>());
      break;
    case BinaryOp::kMul:
      f(BinaryFn<BinaryOp::kMul>());
      break;
    case BinaryOp::kDiv:
      f(BinaryFn<BinaryOp::kDiv>());
      break;
    case BinaryOp::kPow:
      f(BinaryFn<BinaryOp::kPow>());
      break;
    case BinaryOp::kMax:
      f(BinaryFn<BinaryOp::kMax>());
      break;
    case BinaryOp::kMin:
      f(BinaryFn<BinaryOp::kMin>());
      break;
  }
}

bool IsValidBinaryOp(BinaryOp op) {
  return static_cast<int>(op) >= static_cast<int>(BinaryOp::kAdd) &&
         static_cast<int>(op) <= static_cast<int>(BinaryOp::kMin);
}

// ---- broadcasting -------------------------------------------------------------------------

// The collapsed iteration space of a broadcast: dims outermost first, operand strides in
// elements (0 on broadcast dims). The output is dense over `shape`.
struct BroadcastPlan {
  Dims shape, lstride, rstride;
};

BroadcastPlan PlanBroadcast(const Shape& out, const Shape& lhs, const Shape& rhs) {
  const int nd = out.ndim();
  Dims ls(nd, 0), rs(nd, 0);
  int64_t lrun = 1, rrun = 1;
  for (int d = nd - 1; d >= 0; --d) {
    const int il = lhs.ndim() - nd + d, ir = rhs.ndim() - nd + d;
    const int64_t dl = il >= 0 ? lhs[il] : 1, dr = ir >= 0 ? rhs[ir] : 1;
    ls[d] = dl == 1 ? 0 : lrun;
    rs[d] = dr == 1 ? 0 : rrun;
    lrun *= dl;
    rrun *= dr;
  }
  BroadcastPlan plan;
  for (int d = 0; d < nd; ++d) {
    if (out[d] == 1) continue;
    if (!plan.shape.empty()) {
      // Merge into the previous (outer) dim when both operands step through them as one.
      const int64_t n = out[d];
      if (plan.lstride.back() == ls[d] * n && plan.rstride.back() == rs[d] * n) {
        plan.shape.back() *= n;
        plan.lstride.back() = ls[d];
        plan.rstride.back() = rs[d];
        continue;
      }
    }
    plan.shape.push_back(out[d]);
    plan.lstride.push_back(ls[d]);
    plan.rstride.push_back(rs[d]);
  }
  if (plan.shape.empty()) {  // every dim 1: one element
    plan.shape = {1};
    plan.lstride = {1};
    plan.rstride = {1};
  }
  return plan;
}

// One inner row; the four stride patterns get their own loops so the compiler vectorizes
// them (the broadcast value is hoisted into a register).
template <OpReqType kReq, typename Fn, typename T>
inline void BroadcastRow(const T* l, int64_t ls, const T* r, int64_t rs, T* o, int64_t n) {
  using A = AccType<T>;
  if (ls != 0 && rs != 0) {
    for (int64_t i = 0; i < n; ++i) {
      Store<kReq>(o + i, Fn::Apply(static_cast<A>(l[i]), static_cast<A>(r[i])));
    }
  } else if (ls != 0) {
    const A b = static_cast<A>(r[0]);
    for (int64_t i = 0; i < n; ++i) Store<kReq>(o + i, Fn::Apply(static_cast<A>(l[i]), b));
  } else if (rs != 0) {
    const A a = static_cast<A>(l[0]);
    for (int64_t i = 0; i < n; ++i) Store<kReq>(o + i, Fn::Apply(a, static_cast<A>(r[i])));
  } else {
    const A v = Fn::Apply(static_cast<A>(l[0]), static_cast<A>(r[0]));
    for (int64_t i = 0; i < n; ++i) Store<kReq>(o + i, v);
  }
}

template <OpReqType kReq, typename Fn, typename T>
void RunBroadcast(const BroadcastPlan& plan, const T* l, const T* r, T* o) {
  const int nd = static_cast<int>(plan.shape.size());
  const int64_t inner = plan.shape[nd - 1];
  // Inner strides are 0 or 1 after collapsing: a kept innermost dim is contiguous.
  const int64_t ils = plan.lstride[nd - 1], irs = plan.rstride[nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= plan.shape[d];
  Dims idx(nd, 0);
  int64_t loff = 0, roff = 0;
  for (int64_t row = 0; row < rows; ++row) {
    BroadcastRow<kReq, Fn>(l + loff, ils, r + roff, irs, o + row * inner, inner);
    for (int d = nd - 2; d >= 0; --d) {
      loff += plan.lstride[d];
      roff += plan.rstride[d];
      if (++idx[d] < plan.shape[d]) break;
      loff -= plan.lstride[d] * plan.shape[d];
      roff -= plan.rstride[d] * plan.shape[d];
      idx[d] = 0;
    }
  }
}

// ---- reductions ---------------------------------------------------------------------------

// Reduces `in` over the dims marked in `reduced` (one flag per dim of in) into `out`, whose
// element count is the product of the kept dims. Accumulates into a buffer of out's size
// while walking the input in memory order, so every pattern reads the input once,
// contiguously; the inner loop is either "acc[j] op= in[j]" (kept innermost dim) or
// "acc op= in[i]" (reduced innermost dim).
template <ReduceOp kOp, typename T>
void RunReduce(const TBlob& in, const std::vector<bool>& reduced, OpReqType req, const TBlob& out) {
  using R = ReduceAcc<T>;
  using A = AccType<T>;
  using Fn = ReduceFn<kOp, R>;
  const T* src = static_cast<const T*>(in.dptr);
  T* dst = static_cast<T*>(out.dptr);
  const int64_t out_size = out.Size();
  const int64_t in_size = in.Size();
  std::vector<R> acc(out_size, Fn::Identity());

  // Collapse: drop size-1 dims, merge neighbours of the same kind.
  Dims shape, astride;
  std::vector<bool> kind;  // true = reduced
  for (int d = 0; d < in.ndim(); ++d) {
    if (in.shape[d] == 1) continue;
    if (!kind.empty() && kind.back() == reduced[d]) {
      shape.back() *= in.shape[d];
    } else {
      shape.push_back(in.shape[d]);
      kind.push_back(reduced[d]);
    }
  }
  if (shape.empty()) {
    shape.push_back(1);
    kind.push_back(true);
  }
  const int nd = static_cast<int>(shape.size());
  astride.assign(nd, 0);
  for (int64_t d = nd - 1, run = 1; d >= 0; --d) {
    if (!kind[d]) {
      astride[d] = run;
      run *= shape[d];
    }
  }

  if (in_size > 0) {
    const int64_t inner = shape[nd - 1];
    const bool inner_reduced = kind[nd - 1];
    const int64_t rows = in_size / inner;
    Dims idx(nd, 0);
    int64_t aoff = 0;
    for (int64_t row = 0; row < rows; ++row) {
      const T* s = src + row * inner;
      R* a = acc.data() + aoff;
      if (inner_reduced) {
        // Independent partial accumulators let the compiler vectorize the reduction
        // without reassociating a single chain.
        constexpr int kLanes = 8;
        R part[kLanes];
        for (int k = 0; k < kLanes; ++k) part[k] = Fn::Identity();
        int64_t i = 0;
        for (; i + kLanes <= inner; i += kLanes) {
          for (int k = 0; k < kLanes; ++k) {
            part[k] = Fn::Apply(part[k], static_cast<R>(static_cast<A>(s[i + k])));
          }
        }
        R total = a[0];
        for (int k = 0; k < kLanes; ++k) total = Fn::Apply(total, part[k]);
        for (; i < inner; ++i) total = Fn::Apply(total, static_cast<R>(static_cast<A>(s[i])));
        a[0] = total;
      } else {
        for (int64_t j = 0; j < inner; ++j) {
          a[j] = Fn::Apply(a[j], static_cast<R>(static_cast<A>(s[j])));
        }
      }
      for (int d = nd - 2; d >= 0; --d) {
        aoff += astride[d];
        if (++idx[d] < shape[d]) break;
        aoff -= astride[d] * shape[d];
        idx[d] = 0;
      }
    }
  }

  const int64_t count = out_size > 0 ? in_size / out_size : 0;
  DispatchReq(req, [&](auto kReq) {
    for (int64_t j = 0; j < out_size; ++j) {
      R v = acc[j];
      if constexpr (kOp == ReduceOp::kMean) {
        if constexpr (std::is_integral_v<R>) {
          v = count > 0 ? v / count : R(0);  // an empty integer mean is 0, not a trap
        } else {
          v = v / static_cast<R>(count);  // an empty float mean is NaN, as in NumPy
        }
      }
      Store<decltype(kReq)::value>(dst + j, static_cast<A>(v));
    }
  });
}

template <typename T>
void ReduceTyped(ReduceOp op, const TBlob& in, const std::vector<bool>& reduced, OpReqType req,
                 const TBlob& out) {
  switch (op) {
    case ReduceOp::kSum:
      return RunReduce<ReduceOp::kSum, T>(in, reduced, req, out);
    case ReduceOp::kMean:
      return RunReduce<ReduceOp::kMean, T>(in, reduced, req, out);
    case ReduceOp::kMax:
      return RunReduce<ReduceOp::kMax, T>(in, reduced, req, out);
    case ReduceOp::kMin:
      return RunReduce<ReduceOp::kMin, T>(in, reduced, req, out);
    case ReduceOp::kProd:
      return RunReduce<ReduceOp::kProd, T>(in, reduced, req, out);
  }
}

absl::Status ReduceMasked(const char* fn, ReduceOp op, const TBlob& in,
                          const std::vector<bool>& reduced, OpReqType req, const TBlob& out) {
  if (static_cast<int>(op) < static_cast<int>(ReduceOp::kSum) ||
      static_cast<int>(op) > static_cast<int>(ReduceOp::kProd)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": invalid ReduceOp ", static_cast<int>(op)));
  }
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(in.dtype, DT, ReduceTyped<DT>(op, in, reduced, req, out),
                      status = UnsupportedDType(fn, in.dtype));
  return status;
}

// ---- GEMM ---------------------------------------------------------------------------------

// c = alpha * op(a) * op(b) + beta * c in float64: op() is packed row-major first so the
// inner loop streams along rows of B and C; K and N are blocked to keep a panel of B in cache.
void GemmF64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
             const double* b, double beta, double* c) {
  if (beta == 0) {
    std::fill(c, c + m * n, 0.0);  // BLAS semantics: C is not read when beta == 0
  } else if (beta != 1) {
    for (int64_t i = 0; i < m * n; ++i) c[i] *= beta;
  }
  std::vector<double> apack, bpack;
  if (ta) {  // stored (k, m)
    apack.resize(m * k);
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t i = 0; i < m; ++i) apack[i * k + p] = a[p * m + i];
    }
    a = apack.data();
  }
  if (tb) {  // stored (n, k)
    bpack.resize(k * n);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) bpack[p * n + j] = b[j * k + p];
    }
    b = bpack.data();
  }
  constexpr int64_t kBlockK = 128, kBlockN = 256;
  for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
    const int64_t p1 = std::min(k, p0 + kBlockK);
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t j1 = std::min(n, j0 + kBlockN);
      for (int64_t i = 0; i < m; ++i) {
        double* crow = c + i * n;
        for (int64_t p = p0; p < p1; ++p) {
          const double aip = alpha * a[i * k + p];
          const double* brow = b + p * n;
          for (int64_t j = j0; j < j1; ++j) crow[j] += aip * brow[j];
        }
      }
    }
  }
}

absl::Status GemmF32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     const float* b, float beta, float* c) {
  if (beta == 0) std::fill(c, c + m * n, 0.0f);  // never let NaN garbage in C through
  // Row-major: lda is the stored row length of A, i.e. k for (m,k) and m for (k,m).
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, ta ? m : k,
                                      b, tb ? k : n, beta, c, n);
  if (st != dnnl_success) {
    return absl::InternalError(absl::StrCat("dnnl_sgemm(M=", m, ", N=", n, ", K=", k,
                                            ") failed with status ", static_cast<int>(st), " at ",
                                            __FILE__, ":", __LINE__));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------

absl::Status BroadcastBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, OpReqType req,
                             const TBlob& out) {
  constexpr const char* kFn = "BroadcastBinary";
  RETURN_IF_ERROR(CheckBlob(kFn, "lhs", lhs));
  RETURN_IF_ERROR(CheckBlob(kFn, "rhs", rhs));
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  RETURN_IF_ERROR(CheckReq(kFn, req));
  if (!IsValidBinaryOp(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFn, ": invalid BinaryOp ", static_cast<int>(op)));
  }
  if (lhs.dtype != rhs.dtype) return DTypeMismatch(kFn, lhs, "lhs", rhs, "rhs");
  if (lhs.dtype != out.dtype) return DTypeMismatch(kFn, lhs, "lhs", out, "out");
  absl::StatusOr<Shape> expected = BroadcastShapes(lhs.shape, rhs.shape);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": ", expected.status().message()));
  }
  if (*expected != out.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": lhs ", lhs.shape.ToString(), " and rhs ", rhs.shape.ToString(), " broadcast to ",
        expected->ToString(), ", but out is ", out.shape.ToString()));
  }
  if (req == OpReqType::kNullOp || out.Size() == 0) return absl::OkStatus();
  const BroadcastPlan plan = PlanBroadcast(out.shape, lhs.shape, rhs.shape);
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(
      out.dtype, DT,
      {
        DispatchBinaryOp(op, [&](auto fn) {
          DispatchReq(req, [&](auto kReq) {
            RunBroadcast<decltype(kReq)::value, decltype(fn)>(
                plan, static_cast<const DT*>(lhs.dptr), static_cast<const DT*>(rhs.dptr),
                static_cast<DT*>(out.dptr));
          });
        });
      },
      status = UnsupportedDType(kFn, out.dtype));
  return status;
}

absl::Status BinaryScalar(BinaryOp op, const TBlob& in, double scalar, bool scalar_on_left,
                          OpReqType req, const TBlob& out) {
  constexpr const char* kFn = "BinaryScalar";
  RETURN_IF_ERROR(CheckBlob(kFn, "in", in));
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  RETURN_IF_ERROR(CheckReq(kFn, req));
  if (!IsValidBinaryOp(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFn, ": invalid BinaryOp ", static_cast<int>(op)));
  }
  if (in.dtype != out.dtype) return DTypeMismatch(kFn, in, "in", out, "out");
  if (in.shape != out.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": shape mismatch: in is ", in.shape.ToString(), ", out is ", out.shape.ToString()));
  }
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  const int64_t n = in.Size();
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(
      in.dtype, DT,
      {
        using A = AccType<DT>;
        // The scalar takes the array's type first (as in MXNet): 2.5 on an int array is 2.
        const A s = Convert<A>(scalar);
        const DT* src = static_cast<const DT*>(in.dptr);
        DT* dst = static_cast<DT*>(out.dptr);
        DispatchBinaryOp(op, [&](auto fn) {
          using Fn = decltype(fn);
          DispatchReq(req, [&](auto kReq) {
            constexpr OpReqType kR = decltype(kReq)::value;
            if (scalar_on_left) {
              for (int64_t i = 0; i < n; ++i) {
                Store<kR>(dst + i, Fn::Apply(s, static_cast<A>(src[i])));
              }
            } else {
              for (int64_t i = 0; i < n; ++i) {
                Store<kR>(dst + i, Fn::Apply(static_cast<A>(src[i]), s));
              }
            }
          });
        });
      },
      status = UnsupportedDType(kFn, in.dtype));
  return status;
}

absl::Status Reduce(ReduceOp op, const TBlob& in, absl::Span<const int> axes, OpReqType req,
                    const TBlob& out) {
  constexpr const char* kFn = "Reduce";
  RETURN_IF_ERROR(CheckBlob(kFn, "in", in));
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  RETURN_IF_ERROR(CheckReq(kFn, req));
  if (in.dtype != out.dtype) return DTypeMismatch(kFn, in, "in", out, "out");
  std::vector<bool> reduced(in.ndim(), axes.empty());
  for (int axis : axes) {
    absl::StatusOr<int> a = NormalizeAxis(axis, in.ndim());
    if (!a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kFn, ": ", a.status().message(),
                                                     " (input shape ", in.shape.ToString(), ")"));
    }
    if (reduced[*a]) {
      return absl::InvalidArgumentError(absl::StrCat(kFn, ": duplicate axis ", axis, " in (",
                                                     absl::StrJoin(axes, ","), ") for input shape ",
                                                     in.shape.ToString()));
    }
    reduced[*a] = true;
  }
  int64_t kept = 1;
  for (int d = 0; d < in.ndim(); ++d) {
    if (!reduced[d]) kept *= in.shape[d];
  }
  if (kept != out.Size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": reducing ", in.shape.ToString(), " over axes (", absl::StrJoin(axes, ","),
        ") leaves ", kept, " elements, but out ", out.shape.ToString(), " has ", out.Size()));
  }
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  return ReduceMasked(kFn, op, in, reduced, req, out);
}

absl::Status SumToShape(const TBlob& in, OpReqType req, const TBlob& out) {
  constexpr const char* kFn = "SumToShape";
  RETURN_IF_ERROR(CheckBlob(kFn, "in", in));
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  RETURN_IF_ERROR(CheckReq(kFn, req));
  if (in.dtype != out.dtype) return DTypeMismatch(kFn, in, "in", out, "out");
  const int nd = in.ndim(), lead = in.ndim() - out.ndim();
  std::vector<bool> reduced(nd, false);
  bool ok = lead >= 0;
  for (int d = 0; ok && d < nd; ++d) {
    const int64_t od = d >= lead ? out.shape[d - lead] : 1;
    if (od == in.shape[d]) continue;
    if (od == 1) {
      reduced[d] = true;
    } else {
      ok = false;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": out shape ", out.shape.ToString(),
                                                   " does not broadcast to in shape ",
                                                   in.shape.ToString()));
  }
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  return ReduceMasked(kFn, ReduceOp::kSum, in, reduced, req, out);
}

absl::Status Gemm(bool transpose_a, bool transpose_b, double alpha, const TBlob& a, const TBlob& b,
                  double beta, const TBlob& c) {
  constexpr const char* kFn = "Gemm";
  RETURN_IF_ERROR(CheckBlob(kFn, "a", a));
  RETURN_IF_ERROR(CheckBlob(kFn, "b", b));
  RETURN_IF_ERROR(CheckBlob(kFn, "c", c));
  if (a.dtype != b.dtype) return DTypeMismatch(kFn, a, "a", b, "b");
  if (a.dtype != c.dtype) return DTypeMismatch(kFn, a, "a", c, "c");
  const auto describe = [&] {
    return absl::StrCat("a ", a.shape.ToString(), transpose_a ? " (transposed)" : "", ", b ",
                        b.shape.ToString(), transpose_b ? " (transposed)" : "", ", c ",
                        c.shape.ToString());
  };
  if (a.ndim() != 2 || b.ndim() != 2 || c.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": needs 2-D blobs; got ", describe()));
  }
  const int64_t m = transpose_a ? a.shape[1] : a.shape[0];
  const int64_t k = transpose_a ? a.shape[0] : a.shape[1];
  const int64_t kb = transpose_b ? b.shape[1] : b.shape[0];
  const int64_t n = transpose_b ? b.shape[0] : b.shape[1];
  if (k != kb || c.shape[0] != m || c.shape[1] != n) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": inconsistent shapes: ", describe()));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  switch (a.dtype) {
    case DType::kFloat64:
      GemmF64(transpose_a, transpose_b, m, n, k, alpha, static_cast<const double*>(a.dptr),
              static_cast<const double*>(b.dptr), beta, static_cast<double*>(c.dptr));
      return absl::OkStatus();
    case DType::kFloat32:
      if (k == 0) {  // oneDNN rejects K == 0; C = beta * C
        float* cp = static_cast<float*>(c.dptr);
        for (int64_t i = 0; i < m * n; ++i) cp[i] = beta == 0 ? 0.0f : cp[i] * beta;
        return absl::OkStatus();
      }
      return GemmF32(transpose_a, transpose_b, m, n, k, static_cast<float>(alpha),
                     static_cast<const float*>(a.dptr), static_cast<const float*>(b.dptr),
                     static_cast<float>(beta), static_cast<float*>(c.dptr));
    case DType::kFloat16:
    case DType::kBFloat16: {
      // Half types compute in float: widen, sgemm, round back once.
      std::vector<float> af(a.Size()), bf(b.Size()), cf(c.Size());
      TBlob at(af.data(), a.shape), bt(bf.data(), b.shape), ct(cf.data(), c.shape);
      RETURN_IF_ERROR(Cast(a, at));
      RETURN_IF_ERROR(Cast(b, bt));
      if (beta != 0) RETURN_IF_ERROR(Cast(c, ct));
      RETURN_IF_ERROR(Gemm(transpose_a, transpose_b, alpha, at, bt, beta, ct));
      return Cast(ct, c);
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          kFn, ": supports float32, float64, float16 and bfloat16; got ", DTypeName(a.dtype)));
  }
}

absl::Status Cast(const TBlob& in, const TBlob& out) {
  constexpr const char* kFn = "Cast";
  RETURN_IF_ERROR(CheckBlob(kFn, "in", in));
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  if (in.shape != out.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": shape mismatch: in is ", in.shape.ToString(), ", out is ", out.shape.ToString()));
  }
  if (in.dtype == out.dtype) return Copy(in, OpReqType::kWriteTo, out);
  const int64_t n = in.Size();
  // Mixed precision's conversions, many values at a time (internal/half_convert.h).
  if (in.dtype == DType::kFloat32 && out.dtype == DType::kFloat16) {
    internal::FloatToHalf(static_cast<const float*>(in.dptr), static_cast<Half*>(out.dptr), n);
    return absl::OkStatus();
  }
  if (in.dtype == DType::kFloat16 && out.dtype == DType::kFloat32) {
    internal::HalfToFloat(static_cast<const Half*>(in.dptr), static_cast<float*>(out.dptr), n);
    return absl::OkStatus();
  }
  if (in.dtype == DType::kFloat32 && out.dtype == DType::kBFloat16) {
    internal::FloatToBFloat16(static_cast<const float*>(in.dptr), static_cast<BFloat16*>(out.dptr), n);
    return absl::OkStatus();
  }
  if (in.dtype == DType::kBFloat16 && out.dtype == DType::kFloat32) {
    internal::BFloat16ToFloat(static_cast<const BFloat16*>(in.dptr), static_cast<float*>(out.dptr), n);
    return absl::OkStatus();
  }
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(
      in.dtype, IT,
      {
        TESSERA_TYPE_SWITCH(
            out.dtype, OT,
            {
              const IT* src = static_cast<const IT*>(in.dptr);
              OT* dst = static_cast<OT*>(out.dptr);
              for (int64_t i = 0; i < n; ++i) dst[i] = Convert<OT>(src[i]);
            },
            status = UnsupportedDType(kFn, out.dtype));
      },
      status = UnsupportedDType(kFn, in.dtype));
  return status;
}

absl::Status Fill(const TBlob& out, double value) {
  constexpr const char* kFn = "Fill";
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(
      out.dtype, DT,
      {
        DT* dst = static_cast<DT*>(out.dptr);
        std::fill(dst, dst + out.Size(), Convert<DT>(value));
      },
      status = UnsupportedDType(kFn, out.dtype));
  return status;
}

absl::Status Copy(const TBlob& in, OpReqType req, const TBlob& out) {
  constexpr const char* kFn = "Copy";
  RETURN_IF_ERROR(CheckBlob(kFn, "in", in));
  RETURN_IF_ERROR(CheckBlob(kFn, "out", out));
  RETURN_IF_ERROR(CheckReq(kFn, req));
  if (in.dtype != out.dtype) return DTypeMismatch(kFn, in, "in", out, "out");
  if (in.shape != out.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": shape mismatch: in is ", in.shape.ToString(), ", out is ", out.shape.ToString()));
  }
  switch (req) {
    case OpReqType::kNullOp:
      return absl::OkStatus();
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      if (in.dptr != out.dptr && in.Size() > 0) std::memmove(out.dptr, in.dptr, in.Bytes());
      return absl::OkStatus();
    case OpReqType::kAddTo:
      break;
  }
  const int64_t n = in.Size();
  absl::Status status = absl::OkStatus();
  TESSERA_TYPE_SWITCH(
      in.dtype, DT,
      {
        using A = AccType<DT>;
        const DT* src = static_cast<const DT*>(in.dptr);
        DT* dst = static_cast<DT*>(out.dptr);
        for (int64_t i = 0; i < n; ++i) {
          Store<OpReqType::kAddTo>(dst + i, static_cast<A>(src[i]));
        }
      },
      status = UnsupportedDType(kFn, in.dtype));
  return status;
}

}  // namespace tessera::math

#include "ndarray/arithmetic.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "ndarray/math.h"

namespace tessera {
namespace {

using engine::FnProperty;
using engine::RunContext;

absl::Status CheckNotNone(const char* op, const NDArray& a) {
  if (a.is_none()) return absl::InvalidArgumentError(absl::StrCat(op, ": a none array"));
  return absl::OkStatus();
}

// The kernels of math.h are host kernels.
absl::Status CheckComputable(const char* op, const NDArray& a) {
  RETURN_IF_ERROR(CheckNotNone(op, a));
  if (a.ctx().is_gpu()) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": no GPU kernel for NDArray arithmetic (array on ", a.ctx().ToString(),
                     "); CopyTo a CPU context first"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameCtxAndDType(const char* op, const NDArray& a, const NDArray& b) {
  if (a.ctx() != b.ctx()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": arrays on different devices, ", a.ctx().ToString(), " and ", b.ctx().ToString()));
  }
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dtypes differ, ", DTypeName(a.dtype()), " ", a.shape().ToString(),
                     " and ", DTypeName(b.dtype()), " ", b.shape().ToString()));
  }
  return absl::OkStatus();
}

// Pushes a host function that writes `out` and reads `inputs`.
absl::Status PushCompute(const char* name, std::function<absl::Status()> fn,
                         std::vector<engine::VarHandle> const_vars, const NDArray& out) {
  const Runtime& rt = out.runtime();
  return rt.engine->PushSync([fn = std::move(fn)](RunContext) { return fn(); }, out.ctx(),
                             const_vars, {out.var()}, FnProperty::kNormal, 0, name);
}

// Whether two blobs' byte ranges intersect.
bool Overlaps(const TBlob& a, const TBlob& b) {
  const char* a0 = static_cast<const char*>(a.dptr);
  const char* b0 = static_cast<const char*>(b.dptr);
  return a0 < b0 + b.Bytes() && b0 < a0 + a.Bytes();
}

absl::StatusOr<NDArray> Binary(const char* name, math::BinaryOp op, const NDArray& lhs,
                               const NDArray& rhs) {
  RETURN_IF_ERROR(CheckComputable(name, lhs));
  RETURN_IF_ERROR(CheckComputable(name, rhs));
  RETURN_IF_ERROR(CheckSameCtxAndDType(name, lhs, rhs));
  absl::StatusOr<Shape> shape = BroadcastShapes(lhs.shape(), rhs.shape());
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", shape.status().message()));
  }
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(lhs.runtime(), *shape, lhs.ctx(), lhs.dtype()));
  const TBlob a = lhs.data(), b = rhs.data(), o = out.data();
  RETURN_IF_ERROR(PushCompute(
      name, [op, a, b, o] { return math::BroadcastBinary(op, a, b, OpReqType::kWriteTo, o); },
      {lhs.var(), rhs.var()}, out));
  return out;
}

absl::StatusOr<NDArray> Scalar(const char* name, math::BinaryOp op, const NDArray& in,
                               double scalar, bool scalar_on_left) {
  RETURN_IF_ERROR(CheckComputable(name, in));
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(in.runtime(), in.shape(), in.ctx(), in.dtype()));
  const TBlob a = in.data(), o = out.data();
  RETURN_IF_ERROR(PushCompute(
      name,
      [op, a, o, scalar, scalar_on_left] {
        return math::BinaryScalar(op, a, scalar, scalar_on_left, OpReqType::kWriteTo, o);
      },
      {in.var()}, out));
  return out;
}

absl::Status InPlace(const char* name, math::BinaryOp op, const NDArray& lhs, const NDArray& rhs) {
  RETURN_IF_ERROR(CheckComputable(name, lhs));
  RETURN_IF_ERROR(CheckComputable(name, rhs));
  RETURN_IF_ERROR(CheckSameCtxAndDType(name, lhs, rhs));
  absl::StatusOr<Shape> shape = BroadcastShapes(lhs.shape(), rhs.shape());
  if (!shape.ok() || *shape != lhs.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": rhs of shape ", rhs.shape().ToString(),
                                                   " does not broadcast to lhs shape ",
                                                   lhs.shape().ToString()));
  }
  const TBlob a = lhs.data(), b = rhs.data();
  // The kernel handles out == rhs exactly; any other overlap (a shifted view of the same
  // chunk, or a row broadcast over its own matrix) would read elements it already wrote,
  // so such an rhs is snapshotted first, giving NumPy's "read everything, then write".
  const bool snapshot =
      lhs.var() == rhs.var() && Overlaps(a, b) && !(a.dptr == b.dptr && a.shape == b.shape);
  return PushCompute(
      name,
      [op, a, b, snapshot]() -> absl::Status {
        if (!snapshot) return math::BroadcastBinary(op, a, b, OpReqType::kWriteInplace, a);
        std::vector<char> copy(b.Bytes());
        std::memcpy(copy.data(), b.dptr, copy.size());
        const TBlob rhs_copy(copy.data(), b.shape, b.dtype, b.ctx);
        return math::BroadcastBinary(op, a, rhs_copy, OpReqType::kWriteInplace, a);
      },
      {rhs.var()}, lhs);
}

absl::Status InPlaceScalar(const char* name, math::BinaryOp op, const NDArray& lhs, double scalar) {
  RETURN_IF_ERROR(CheckComputable(name, lhs));
  const TBlob a = lhs.data();
  return PushCompute(
      name,
      [op, a, scalar] {
        return math::BinaryScalar(op, a, scalar, /*scalar_on_left=*/false, OpReqType::kWriteInplace,
                                  a);
      },
      {}, lhs);
}

absl::StatusOr<NDArray> Reduction(const char* name, math::ReduceOp op, const NDArray& in,
                                  absl::Span<const int> axes, bool keepdims) {
  RETURN_IF_ERROR(CheckComputable(name, in));
  const int ndim = in.shape().ndim();
  std::vector<bool> reduced(ndim, axes.empty());
  std::vector<int> normalized;
  for (int axis : axes) {
    absl::StatusOr<int> a = NormalizeAxis(axis, ndim);
    if (!a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": axes (", absl::StrJoin(axes, ","),
                                                     ") for shape ", in.shape().ToString(), ": ",
                                                     a.status().message()));
    }
    if (reduced[*a]) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": axis ", axis, " repeated in (",
                                                     absl::StrJoin(axes, ","), ") for shape ",
                                                     in.shape().ToString()));
    }
    reduced[*a] = true;
    normalized.push_back(*a);
  }
  Shape out_shape;
  for (int i = 0; i < ndim; ++i) {
    if (!reduced[i]) {
      out_shape.push_back(in.shape()[i]);
    } else if (keepdims) {
      out_shape.push_back(1);
    }
  }
  if (out_shape.ndim() == 0) out_shape = Shape{1};
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(in.runtime(), out_shape, in.ctx(), in.dtype()));
  const TBlob i = in.data(), o = out.data();
  RETURN_IF_ERROR(PushCompute(
      name,
      [op, i, o, normalized = std::move(normalized)] {
        return math::Reduce(op, i, normalized, OpReqType::kWriteTo, o);
      },
      {in.var()}, out));
  return out;
}

}  // namespace

// ---- Filled arrays ----

absl::Status Fill(const NDArray& array, double value) {
  RETURN_IF_ERROR(CheckNotNone("Fill", array));
  const TBlob o = array.data();
  if (!o.ctx.is_gpu()) {
    return PushCompute(
        "Fill", [o, value] { return math::Fill(o, value); }, {}, array);
  }
#if TESSERA_USE_CUDA
  // No device fill kernel yet: fill on the host and copy over the copy stream.
  return array.runtime().engine->PushSync(
      [o, value](RunContext rctx) -> absl::Status {
        std::vector<char> host(o.Bytes());
        RETURN_IF_ERROR(math::Fill(TBlob(host.data(), o.shape, o.dtype, Context::CPU()), value));
        cudaStream_t stream = rctx.get_stream<cudaStream_t>();
        CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(o.dptr, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
        CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // `host` dies on return
        return absl::OkStatus();
      },
      array.ctx(), {}, {array.var()}, FnProperty::kCopyToGPU, 0, "Fill");
#else
  return absl::FailedPreconditionError(
      absl::StrCat("Fill: array on ", o.ctx.ToString(), " but Tessera was built without CUDA"));
#endif
}

absl::StatusOr<NDArray> Full(const Runtime& rt, const Shape& shape, double value, Context ctx,
                             DType dtype) {
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(rt, shape, ctx, dtype));
  RETURN_IF_ERROR(Fill(out, value));
  return out;
}

absl::StatusOr<NDArray> Zeros(const Runtime& rt, const Shape& shape, Context ctx, DType dtype) {
  return Full(rt, shape, 0.0, ctx, dtype);
}

absl::StatusOr<NDArray> Ones(const Runtime& rt, const Shape& shape, Context ctx, DType dtype) {
  return Full(rt, shape, 1.0, ctx, dtype);
}

// ---- Elementwise ----

#define TESSERA_DEFINE_BINARY(Fn, Op, OPSYM)                                                      \
  absl::StatusOr<NDArray> Fn(const NDArray& lhs, const NDArray& rhs) {                            \
    return Binary(#Fn, math::BinaryOp::Op, lhs, rhs);                                             \
  }                                                                                               \
  absl::StatusOr<NDArray> Fn(const NDArray& lhs, double rhs) {                                    \
    return Scalar(#Fn, math::BinaryOp::Op, lhs, rhs, false);                                      \
  }                                                                                               \
  absl::StatusOr<NDArray> Fn(double lhs, const NDArray& rhs) {                                    \
    return Scalar(#Fn, math::BinaryOp::Op, rhs, lhs, true);                                       \
  }                                                                                               \
  absl::StatusOr<NDArray> operator OPSYM(const NDArray& lhs, const NDArray& rhs) {                \
    return Fn(lhs, rhs);                                                                          \
  }                                                                                               \
  absl::StatusOr<NDArray> operator OPSYM(const NDArray& lhs, double rhs) { return Fn(lhs, rhs); } \
  absl::StatusOr<NDArray> operator OPSYM(double lhs, const NDArray& rhs) { return Fn(lhs, rhs); } \
  absl::Status operator OPSYM##=(const NDArray& lhs, const NDArray& rhs) {                        \
    return InPlace(#Fn "InPlace", math::BinaryOp::Op, lhs, rhs);                                  \
  }                                                                                               \
  absl::Status operator OPSYM##=(const NDArray& lhs, double rhs) {                                \
    return InPlaceScalar(#Fn "InPlace", math::BinaryOp::Op, lhs, rhs);                            \
  }

TESSERA_DEFINE_BINARY(Add, kAdd, +)
TESSERA_DEFINE_BINARY(Subtract, kSub, -)
TESSERA_DEFINE_BINARY(Multiply, kMul, *)
TESSERA_DEFINE_BINARY(Divide, kDiv, /)

#undef TESSERA_DEFINE_BINARY

// ---- Reductions ----

absl::StatusOr<NDArray> Sum(const NDArray& in, absl::Span<const int> axes, bool keepdims) {
  return Reduction("Sum", math::ReduceOp::kSum, in, axes, keepdims);
}
absl::StatusOr<NDArray> Mean(const NDArray& in, absl::Span<const int> axes, bool keepdims) {
  return Reduction("Mean", math::ReduceOp::kMean, in, axes, keepdims);
}
absl::StatusOr<NDArray> Max(const NDArray& in, absl::Span<const int> axes, bool keepdims) {
  return Reduction("Max", math::ReduceOp::kMax, in, axes, keepdims);
}

// ---- Dot ----

absl::StatusOr<NDArray> Dot(const NDArray& a, const NDArray& b, bool transpose_a,
                            bool transpose_b) {
  RETURN_IF_ERROR(CheckComputable("Dot", a));
  RETURN_IF_ERROR(CheckComputable("Dot", b));
  RETURN_IF_ERROR(CheckSameCtxAndDType("Dot", a, b));
  const std::string what = absl::StrCat(a.shape().ToString(), transpose_a ? "^T" : "", " x ",
                                        b.shape().ToString(), transpose_b ? "^T" : "");
  if (a.shape().ndim() != 2 || b.shape().ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("Dot: needs 2-D arrays, got ", what));
  }
  if (a.dtype() != DType::kFloat32 && a.dtype() != DType::kFloat64) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dot: needs float32 or float64, got ", DTypeName(a.dtype())));
  }
  const int64_t m = a.shape()[transpose_a ? 1 : 0], ka = a.shape()[transpose_a ? 0 : 1];
  const int64_t kb = b.shape()[transpose_b ? 1 : 0], n = b.shape()[transpose_b ? 0 : 1];
  if (ka != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dot: inner dimensions differ (", ka, " vs ", kb, ") in ", what));
  }
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(a.runtime(), Shape{m, n}, a.ctx(), a.dtype()));
  const TBlob x = a.data(), y = b.data(), c = out.data();
  RETURN_IF_ERROR(PushCompute(
      "Dot",
      [x, y, c, transpose_a, transpose_b]() -> absl::Status {
        return math::Gemm(transpose_a, transpose_b, 1.0, x, y, 0.0, c);
      },
      {a.var(), b.var()}, out));
  return out;
}

// ---- Types and devices ----

absl::StatusOr<NDArray> Cast(const NDArray& in, DType dtype) {
  RETURN_IF_ERROR(CheckComputable("Cast", in));
  if (!IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cast: invalid target dtype ", static_cast<int>(dtype)));
  }
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(in.runtime(), in.shape(), in.ctx(), dtype));
  const TBlob i = in.data(), o = out.data();
  RETURN_IF_ERROR(PushCompute(
      "Cast", [i, o] { return math::Cast(i, o); }, {in.var()}, out));
  return out;
}

absl::StatusOr<NDArray> CopyTo(const NDArray& in, Context ctx) {
  RETURN_IF_ERROR(CheckNotNone("CopyTo", in));
  ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(in.runtime(), in.shape(), ctx, in.dtype()));
  RETURN_IF_ERROR(CopyFromTo(in, out));
  return out;
}

absl::Status CopyFromTo(const NDArray& from, const NDArray& to, int priority) {
  RETURN_IF_ERROR(CheckNotNone("CopyFromTo", from));
  RETURN_IF_ERROR(CheckNotNone("CopyFromTo", to));
  if (from.shape() != to.shape() || from.dtype() != to.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyFromTo: from ", DTypeName(from.dtype()), " ", from.shape().ToString(), " to ",
        DTypeName(to.dtype()), " ", to.shape().ToString(), ": shape and dtype must match"));
  }
  engine::Engine* eng = from.runtime().engine;
  const TBlob src = from.data(), dst = to.data();
  const size_t bytes = src.Bytes();
  if (!src.ctx.is_gpu() && !dst.ctx.is_gpu()) {
    // memmove: two views of one chunk may overlap.
    return eng->PushSync(
        [src, dst, bytes](RunContext) {
          if (src.dptr != dst.dptr) std::memmove(dst.dptr, src.dptr, bytes);
          return absl::OkStatus();
        },
        to.ctx(), {from.var()}, {to.var()}, FnProperty::kNormal, priority, "CopyFromTo");
  }
#if TESSERA_USE_CUDA
  FnProperty prop = FnProperty::kNormal;
  Context run_ctx = to.ctx();
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  if (!src.ctx.is_gpu()) {
    prop = FnProperty::kCopyToGPU;
    run_ctx = to.ctx();
    kind = cudaMemcpyHostToDevice;
  } else if (!dst.ctx.is_gpu()) {
    prop = FnProperty::kCopyFromGPU;
    run_ctx = from.ctx();
    kind = cudaMemcpyDeviceToHost;
  } else if (src.ctx != dst.ctx) {
    kind = cudaMemcpyDefault;  // peer copy through unified addressing
  }
  return eng->PushSync(
      [src, dst, bytes, kind](RunContext rctx) -> absl::Status {
        if (src.dptr == dst.dptr) return absl::OkStatus();
        // Ordering against later users is the engine's (it records an event on this stream).
        CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(dst.dptr, src.dptr, bytes, kind, rctx.get_stream<cudaStream_t>()));
        return absl::OkStatus();
      },
      run_ctx, {from.var()}, {to.var()}, prop, priority, "CopyFromTo");
#else
  return absl::FailedPreconditionError(absl::StrCat("CopyFromTo: ", src.ctx.ToString(), " -> ",
                                                    dst.ctx.ToString(),
                                                    " needs CUDA, and Tessera was built without"));
#endif
}

}  // namespace tessera

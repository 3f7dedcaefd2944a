#include "ndarray/arithmetic.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "engine/engine.h"
#include "engine/resource.h"
#include "ndarray/math.h"

#if TESSERA_USE_CUDA
#include "ndarray/cuda/device_math.h"
#endif

namespace tessera {
namespace {

using engine::FnProperty;
using engine::RunContext;

absl::Status CheckNotNone(const char* op, const NDArray& a) {
  if (a.is_none()) return absl::InvalidArgumentError(absl::StrCat(op, ": a none array"));
  return absl::OkStatus();
}

// Arrays on a GPU compute with ndarray/cuda's kernels, which exist only in a CUDA build.
absl::Status CheckComputable(const char* op, const NDArray& a) {
  RETURN_IF_ERROR(CheckNotNone(op, a));
#if !TESSERA_USE_CUDA
  if (a.ctx().is_gpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": array on ", a.ctx().ToString(), " but Tessera was built without CUDA"));
  }
#endif
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

// A kernel call on the device of the blobs it is given: on a GPU it gets the run context's
// stream, on the CPU a null one.
using Kernel = std::function<absl::Status(void* stream)>;

// Pushes `fn` on out's device, writing `out` (and `extra_mutate`, e.g. a scratch resource)
// and reading `const_vars`.
absl::Status PushCompute(const char* name, Kernel fn, std::vector<engine::VarHandle> const_vars,
                         const NDArray& out, std::vector<engine::VarHandle> extra_mutate = {}) {
  const Runtime& rt = out.runtime();
  std::vector<engine::VarHandle> mutate = {out.var()};
  mutate.insert(mutate.end(), extra_mutate.begin(), extra_mutate.end());
  const bool gpu = out.ctx().is_gpu();
  return rt.engine->PushSync(
      [fn = std::move(fn), gpu](RunContext rctx) {
        return fn(gpu ? rctx.stream : nullptr);
      },
      out.ctx(), std::move(const_vars), std::move(mutate), FnProperty::kNormal, 0, name);
}

// math.h's kernels, or their device twins (ndarray/cuda/device_math.h) for GPU blobs.
#if TESSERA_USE_CUDA
cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }
#define TESSERA_ON_DEVICE(blob, cpu_call, gpu_call) \
  ((blob).ctx.is_gpu() ? (gpu_call) : (cpu_call))
#else
#define TESSERA_ON_DEVICE(blob, cpu_call, gpu_call) (cpu_call)
#endif

absl::Status DoBroadcastBinary(math::BinaryOp op, const TBlob& a, const TBlob& b, OpReqType req,
                               const TBlob& o, void* stream) {
  return TESSERA_ON_DEVICE(o, math::BroadcastBinary(op, a, b, req, o),
                           gpu_math::BroadcastBinary(op, a, b, req, o, AsStream(stream)));
}

absl::Status DoBinaryScalar(math::BinaryOp op, const TBlob& a, double scalar, bool left,
                            OpReqType req, const TBlob& o, void* stream) {
  return TESSERA_ON_DEVICE(o, math::BinaryScalar(op, a, scalar, left, req, o),
                           gpu_math::BinaryScalar(op, a, scalar, left, req, o, AsStream(stream)));
}

absl::Status DoFill(const TBlob& o, double value, void* stream) {
  return TESSERA_ON_DEVICE(o, math::Fill(o, value), gpu_math::Fill(o, value, AsStream(stream)));
}

absl::Status DoCast(const TBlob& i, const TBlob& o, void* stream) {
  return TESSERA_ON_DEVICE(o, math::Cast(i, o), gpu_math::Cast(i, o, AsStream(stream)));
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
      name,
      [op, a, b, o](void* stream) {
        return DoBroadcastBinary(op, a, b, OpReqType::kWriteTo, o, stream);
      },
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
      [op, a, o, scalar, scalar_on_left](void* stream) {
        return DoBinaryScalar(op, a, scalar, scalar_on_left, OpReqType::kWriteTo, o, stream);
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
  if (snapshot && lhs.ctx().is_gpu()) {
    // A device snapshot is an array of its own, copied first (engine-ordered).
    ASSIGN_OR_RETURN(NDArray copy, CopyTo(rhs, rhs.ctx()));
    const TBlob c = copy.data();
    return PushCompute(
        name,
        [op, a, c](void* stream) {
          return DoBroadcastBinary(op, a, c, OpReqType::kWriteInplace, a, stream);
        },
        {copy.var()}, lhs);
  }
  return PushCompute(
      name,
      [op, a, b, snapshot](void* stream) -> absl::Status {
        if (!snapshot) return DoBroadcastBinary(op, a, b, OpReqType::kWriteInplace, a, stream);
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
      [op, a, scalar](void* stream) {
        return DoBinaryScalar(op, a, scalar, /*left=*/false, OpReqType::kWriteInplace, a, stream);
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
  if (!in.ctx().is_gpu()) {
    RETURN_IF_ERROR(PushCompute(
        name,
        [op, i, o, normalized = std::move(normalized)](void*) {
          return math::Reduce(op, i, normalized, OpReqType::kWriteTo, o);
        },
        {in.var()}, out));
    return out;
  }
#if TESSERA_USE_CUDA
  // A reduction with few outputs spreads over the whole device and needs scratch for its
  // partial results: the device's temp space resource (engine-ordered like any variable).
  ASSIGN_OR_RETURN(size_t scratch_bytes, gpu_math::ReduceScratchBytes(i, normalized));
  std::optional<engine::Resource> scratch;
  std::vector<engine::VarHandle> extra;
  if (scratch_bytes > 0) {
    const Runtime& rt = in.runtime();
    if (rt.resources == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(name, ": runtime without resources"));
    }
    ASSIGN_OR_RETURN(scratch, rt.resources->Request(in.ctx(), {engine::ResourceRequest::kTempSpace}));
    extra.push_back(scratch->var);
  }
  RETURN_IF_ERROR(PushCompute(
      name,
      [op, i, o, normalized = std::move(normalized), scratch, scratch_bytes](
          void* stream) -> absl::Status {
        void* space = nullptr;
        if (scratch.has_value()) {
          ASSIGN_OR_RETURN(space, scratch->get_space(scratch_bytes, stream));
        }
        return gpu_math::Reduce(op, i, normalized, OpReqType::kWriteTo, o, space, AsStream(stream));
      },
      {in.var()}, out, std::move(extra)));
#endif
  return out;
}

}  // namespace

// ---- Filled arrays ----

absl::Status Fill(const NDArray& array, double value) {
  RETURN_IF_ERROR(CheckComputable("Fill", array));
  const TBlob o = array.data();
  return PushCompute(
      "Fill", [o, value](void* stream) { return DoFill(o, value, stream); }, {}, array);
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
  if (a.ctx().is_gpu()) {
    // cuBLAS lives with the operators: ops::Invoke("dot", ...) runs it on the GPU.
    return absl::UnimplementedError(absl::StrCat("Dot: arrays on ", a.ctx().ToString(),
                                                 "; NDArray Dot is CPU only, use the dot operator "
                                                 "(ops::Invoke(\"dot\", ...)) on a GPU"));
  }
  const TBlob x = a.data(), y = b.data(), c = out.data();
  RETURN_IF_ERROR(PushCompute(
      "Dot",
      [x, y, c, transpose_a, transpose_b](void*) -> absl::Status {
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
      "Cast", [i, o](void* stream) { return DoCast(i, o, stream); }, {in.var()}, out));
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

// The data-movement operators of ops/array on the GPU: Flatten, Reshape and BlockGrad
// (contiguous copies), transpose, Concat and SliceChannel (strided copies). Every dtype, as
// on the CPU: writes move bytes (cudaMemcpyAsync, or the strided kernel of array_kernels.h),
// kAddTo adds in the type (float for float16 / bfloat16).
//
// Concat and SliceChannel see the joined array as (outer, axis, inner): each part is an
// (outer, part's share of axis * inner) slab at its offset along the row, so every part is
// one 2-D strided copy. transpose is one copy over the output's dims, read through the
// permuted input strides; the launcher merges the axes the permutation keeps together.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/cuda/array_ops_util.h"
#include "ops/cuda/gpu_util.h"
#include "ops/operator.h"

namespace tessera::ops::cuda {
namespace {

// Flatten and Reshape: a copy between equal-size blobs both ways; nothing at all in place.
class CopyGpuOp : public Operator {
 public:
  explicit CopyGpuOp(std::string name) : name_(std::move(name)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return CopyBlob(name_, in[0], out[0], req[0], StreamOf(ctx));
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    return CopyBlob(name_, out_grad[0], in_grad[0], req[0], StreamOf(ctx));
  }

 private:
  std::string name_;
};

// BlockGrad: the identity forward, a zero gradient backward.
class BlockGradGpuOp : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return CopyBlob("BlockGrad", in[0], out[0], req[0], StreamOf(ctx));
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<TBlob>&, const std::vector<OpReqType>& req,
                        const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    return ZeroBlob("BlockGrad", in_grad[0], req[0], StreamOf(ctx));
  }
};

// The CPU property's permutation (ops/array/transpose.cc), with its errors: `axes` checked
// (negative values count from the end) or, when empty, the reversal.
absl::StatusOr<std::vector<int>> Permutation(const std::vector<int>& axes, int ndim) {
  std::vector<int> perm(ndim);
  if (axes.empty()) {
    for (int i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
    return perm;
  }
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("transpose: axes (", absl::StrJoin(axes, ","),
                                                   ") ", why, " for an array of ", ndim,
                                                   " dimensions"));
  };
  if (static_cast<int>(axes.size()) != ndim) return error("is not a permutation");
  std::vector<bool> seen(ndim, false);
  for (int i = 0; i < ndim; ++i) {
    const int a = axes[i] < 0 ? axes[i] + ndim : axes[i];
    if (a < 0 || a >= ndim) return error(absl::StrCat("has axis ", axes[i], " out of range"));
    if (seen[a]) return error(absl::StrCat("repeats axis ", axes[i]));
    seen[a] = true;
    perm[i] = a;
  }
  return perm;
}

class TransposeGpuOp : public Operator {
 public:
  explicit TransposeGpuOp(std::vector<int> axes) : axes_(std::move(axes)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(std::vector<int> perm, Permutation(axes_, in[0].ndim()));
    return Run(ctx, in[0], perm, out[0], req[0]);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(std::vector<int> perm, Permutation(axes_, in_grad[0].ndim()));
    std::vector<int> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
    return Run(ctx, out_grad[0], inverse, in_grad[0], req[0]);
  }

 private:
  // out (contiguous, out.shape[i] = in.shape[perm[i]]) per req = in read through the permuted
  // strides.
  static absl::Status Run(const OpContext& ctx, const TBlob& in, const std::vector<int>& perm,
                          const TBlob& out, OpReqType req) {
    if (req == OpReqType::kNullOp) return absl::OkStatus();
    RETURN_IF_ERROR(CheckBlobs("transpose", {&in, &out}, in.dtype));
    const int ndim = in.ndim();
    const std::vector<int64_t> in_strides = RowMajorStrides(in.shape);
    std::vector<int64_t> shape(ndim), in_stride(ndim);
    for (int i = 0; i < ndim; ++i) {
      shape[i] = in.shape[perm[i]];
      in_stride[i] = in_strides[perm[i]];
    }
    // Like the CPU kernel, only the output's size matters: it is written in permuted order.
    if (out.Size() != in.Size()) {
      return absl::InternalError(absl::StrCat("transpose: output of shape ", out.shape.ToString(),
                                              " for input ", in.shape.ToString()));
    }
    return StridedCopy("transpose", in.dtype, shape, in.dptr, in_stride, out.dptr,
                       RowMajorStrides(Shape(shape.begin(), shape.end())), req, StreamOf(ctx));
  }

  std::vector<int> axes_;
};

class ConcatGpuOp : public Operator {
 public:
  explicit ConcatGpuOp(int dim) : dim_(dim) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return Run(ctx, in, out[0], /*to_joined=*/true, req);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    return Run(ctx, in_grad, out_grad[0], /*to_joined=*/false, req);
  }

 private:
  // Joins the parts into `joined` (req[0]) or splits `joined` into them (req[k] each).
  absl::Status Run(const OpContext& ctx, const std::vector<TBlob>& parts, const TBlob& joined,
                   bool to_joined, const std::vector<OpReqType>& req) {
    if (to_joined && req[0] == OpReqType::kNullOp) return absl::OkStatus();
    absl::StatusOr<int> normalized = NormalizeAxis(dim_, joined.ndim());
    if (!normalized.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Concat: dim ", dim_, ": ", normalized.status().message()));
    }
    const int axis = *normalized;
    const Shape& shape = joined.shape;
    const DType dtype = joined.dtype;
    const int64_t outer = shape.ProdRange(0, axis);
    const int64_t inner = shape.ProdRange(axis + 1, shape.ndim());
    const int64_t row = shape[axis] * inner;
    int64_t offset = 0;  // of the current part within a row of `joined`
    for (size_t k = 0; k < parts.size(); ++k) {
      const TBlob& part = parts[k];
      if (part.ndim() != shape.ndim()) {
        return absl::InternalError(absl::StrCat("Concat: part ", k, " has shape ",
                                                part.shape.ToString(), ", the joined array ",
                                                shape.ToString()));
      }
      const int64_t block = part.shape[axis] * inner;
      const OpReqType r = to_joined ? req[0] : req[k];
      if (r != OpReqType::kNullOp) {
        RETURN_IF_ERROR(CheckBlobs("Concat", {&part, &joined}, dtype));
        void* slab = ElementPtr(joined.dptr, dtype, offset);
        if (to_joined) {
          RETURN_IF_ERROR(StridedCopy("Concat", dtype, {outer, block}, part.dptr, {block, 1}, slab,
                                      {row, 1}, r, StreamOf(ctx)));
        } else {
          RETURN_IF_ERROR(StridedCopy("Concat", dtype, {outer, block}, slab, {row, 1}, part.dptr,
                                      {block, 1}, r, StreamOf(ctx)));
        }
      }
      offset += block;
    }
    if (offset != row) {
      return absl::InternalError(absl::StrCat("Concat: the parts cover ", offset, " of ", row,
                                              " elements per row of ", shape.ToString()));
    }
    return absl::OkStatus();
  }

  int dim_;
};

class SliceChannelGpuOp : public Operator {
 public:
  explicit SliceChannelGpuOp(int axis) : axis_(axis) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out,
                       const std::vector<TBlob>&) override {
    return Run(ctx, in[0], out, /*to_pieces=*/true, req);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    return Run(ctx, in_grad[0], out_grad, /*to_pieces=*/false, req);
  }

 private:
  // Splits `data` into the pieces (req[k] each) or joins them into it (req[0]). The layout
  // is the same with squeeze_axis: only the pieces' shapes drop the axis.
  absl::Status Run(const OpContext& ctx, const TBlob& data, const std::vector<TBlob>& pieces,
                   bool to_pieces, const std::vector<OpReqType>& req) {
    if (!to_pieces && req[0] == OpReqType::kNullOp) return absl::OkStatus();
    absl::StatusOr<int> normalized = NormalizeAxis(axis_, data.ndim());
    if (!normalized.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SliceChannel: ", normalized.status().message()));
    }
    const int axis = *normalized;
    const Shape& shape = data.shape;
    const DType dtype = data.dtype;
    const int64_t n = static_cast<int64_t>(pieces.size());
    const int64_t outer = shape.ProdRange(0, axis);
    const int64_t block = shape[axis] / n * shape.ProdRange(axis + 1, shape.ndim());
    for (int64_t k = 0; k < n; ++k) {
      const TBlob& piece = pieces[k];
      const OpReqType r = to_pieces ? req[k] : req[0];
      if (r == OpReqType::kNullOp) continue;
      if (piece.Size() != outer * block) {
        return absl::InternalError(absl::StrCat("SliceChannel: piece ", k, " has shape ",
                                                piece.shape.ToString(), ", data ",
                                                shape.ToString()));
      }
      RETURN_IF_ERROR(CheckBlobs("SliceChannel", {&piece, &data}, dtype));
      // Piece k of row o starts at (o * n + k) * block.
      void* slab = ElementPtr(data.dptr, dtype, k * block);
      if (to_pieces) {
        RETURN_IF_ERROR(StridedCopy("SliceChannel", dtype, {outer, block}, slab, {n * block, 1},
                                    piece.dptr, {block, 1}, r, StreamOf(ctx)));
      } else {
        RETURN_IF_ERROR(StridedCopy("SliceChannel", dtype, {outer, block}, piece.dptr, {block, 1},
                                    slab, {n * block, 1}, r, StreamOf(ctx)));
      }
    }
    return absl::OkStatus();
  }

  int axis_;
};

absl::StatusOr<std::unique_ptr<Operator>> CreateCopy(const OperatorProperty& prop, Context) {
  return std::unique_ptr<Operator>(new CopyGpuOp(prop.TypeString()));
}

absl::StatusOr<std::unique_ptr<Operator>> CreateBlockGrad(const OperatorProperty&, Context) {
  return std::unique_ptr<Operator>(new BlockGradGpuOp());
}

absl::StatusOr<std::unique_ptr<Operator>> CreateTranspose(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  std::vector<int> axes;
  RETURN_IF_ERROR(r.Read("axes", &axes));
  return std::unique_ptr<Operator>(new TransposeGpuOp(std::move(axes)));
}

absl::StatusOr<std::unique_ptr<Operator>> CreateConcat(const OperatorProperty& prop, Context) {
  ParamReader r(prop);
  int dim = 1;
  RETURN_IF_ERROR(r.Read("dim", &dim));
  return std::unique_ptr<Operator>(new ConcatGpuOp(dim));
}

absl::StatusOr<std::unique_ptr<Operator>> CreateSliceChannel(const OperatorProperty& prop,
                                                             Context) {
  ParamReader r(prop);
  int axis = 1;
  RETURN_IF_ERROR(r.Read("axis", &axis));
  return std::unique_ptr<Operator>(new SliceChannelGpuOp(axis));
}

const bool kRegistered = [] {
  RegisterGpuOperator("Flatten", CreateCopy);
  RegisterGpuOperator("Reshape", CreateCopy);
  RegisterGpuOperator("BlockGrad", CreateBlockGrad);
  RegisterGpuOperator("transpose", CreateTranspose);
  RegisterGpuOperator("Concat", CreateConcat);
  RegisterGpuOperator("SliceChannel", CreateSliceChannel);
  return true;
}();

}  // namespace
}  // namespace tessera::ops::cuda

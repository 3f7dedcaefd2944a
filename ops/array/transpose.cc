// transpose: permutes the axes of an array, out.shape[i] = in.shape[axes[i]], as MXNet's
// src/operator/tensor/matrix_op-inl.h; with no axes the order is reversed. The backward is
// the transpose by the inverse permutation. Every dtype is supported.
//
// The kernel walks the output in order with an odometer over the input strides, so the
// innermost loop is a strided gather along the last output axis.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

// MXNet 1.9's TransposeParam (src/operator/tensor/matrix_op-inl.h), its one field: axes.
struct TransposeParam {
  std::vector<int> axes;

  static const ParamSchema<TransposeParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<TransposeParam>("transpose");
      s->Field("axes", &TransposeParam::axes)
          .Describe("the permutation of the axes; empty reverses them");
      return s;
    }();
    return *schema;
  }
};

// The permutation for an `ndim`-D array: `axes` checked (negative values count from the
// end) or, when empty, the reversal.
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

// out[j] = in[perm-gathered index], per req. `in_shape` is the input's shape.
template <typename T>
void TransposeKernel(const T* in, const Shape& in_shape, const std::vector<int>& perm, T* out,
                     OpReqType req) {
  if (req == OpReqType::kNullOp) return;
  const int ndim = in_shape.ndim();
  const Shape::Dims in_strides = in_shape.Strides();
  std::vector<int64_t> out_dims(ndim), stride(ndim);  // stride: input stride of output axis
  for (int i = 0; i < ndim; ++i) {
    out_dims[i] = in_shape[perm[i]];
    stride[i] = in_strides[perm[i]];
  }
  const int64_t n = in_shape.Size();
  const int64_t inner = out_dims[ndim - 1];
  const int64_t inner_stride = stride[ndim - 1];
  std::vector<int64_t> index(ndim, 0);  // output index of the current row, last axis 0
  int64_t src = 0;                      // input offset of that position
  for (int64_t row = 0; row < n; row += inner) {
    array_internal::MapWithReq(out + row, inner, req, [&](int64_t k) {
      return static_cast<AccType<T>>(in[src + k * inner_stride]);
    });
    // Advance the odometer over axes ndim-2 .. 0.
    for (int axis = ndim - 2; axis >= 0; --axis) {
      src += stride[axis];
      if (++index[axis] < out_dims[axis]) break;
      src -= stride[axis] * out_dims[axis];
      index[axis] = 0;
    }
  }
}

class TransposeOp : public Operator {
 public:
  explicit TransposeOp(TransposeParam param) : param_(std::move(param)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    ASSIGN_OR_RETURN(std::vector<int> perm, Permutation(param_.axes, in_data[0].ndim()));
    return Run(in_data[0], perm, out_data[0], req[0]);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    ASSIGN_OR_RETURN(std::vector<int> perm, Permutation(param_.axes, in_grad[0].ndim()));
    std::vector<int> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
    return Run(out_grad[0], inverse, in_grad[0], req[0]);
  }

 private:
  static absl::Status Run(const TBlob& in, const std::vector<int>& perm, const TBlob& out,
                          OpReqType req) {
    absl::Status status;
    TESSERA_TYPE_SWITCH(in.dtype, T,
                        TransposeKernel(in.data<T>(), in.shape, perm, out.data<T>(), req),
                        status = array_internal::UnsupportedDType("transpose", in.dtype, false));
    return status;
  }

  TransposeParam param_;
};

class TransposeProp : public PropertyWithParam<TransposeProp, TransposeParam> {
 public:
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const Shape& data = (*in_shape)[0];
    const Shape& out = (*out_shape)[0];
    const int ndim = data.ndim() > 0 ? data.ndim() : out.ndim();
    if (ndim == 0) return false;
    ASSIGN_OR_RETURN(std::vector<int> perm, Permutation(param_.axes, ndim));
    // Both directions: each known dimension of one side fixes one of the other. Input to
    // output first, so a conflict is reported against the output.
    if (data.ndim() == ndim) {
      Shape from_in = data;
      for (int i = 0; i < ndim; ++i) from_in[i] = data[perm[i]];
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, from_in, out_shape));
    }
    if (out.ndim() == ndim) {
      Shape from_out = out;
      for (int i = 0; i < ndim; ++i) from_out[perm[i]] = out[i];
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, from_out, in_shape));
    }
    return (*in_shape)[0].is_known();
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<TransposeOp>(param_);
  }
  std::string TypeString() const override { return "transpose"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(transpose, TransposeProp)
    .Describe("Permutes the axes: out.shape[i] = data.shape[axes[i]]; reverses them by default.")
    .AddParams<TransposeParam>();

}  // namespace tessera::ops

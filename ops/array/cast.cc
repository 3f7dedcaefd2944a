// Cast and amp_cast (MXNet): the input's values converted to `dtype` (round-to-nearest-even
// for float16 / bfloat16), and backward the output's gradient converted back to the input's
// type. amp_cast is what the mixed-precision pass (graph/amp.h) inserts; MXNet keeps the two
// apart so that a converted graph shows which casts the pass made. Every dtype.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ndarray/math.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

struct CastParam {
  DType dtype = DType::kUnknown;
  static const ParamSchema<CastParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<CastParam>("Cast");
      s->Field("dtype", &CastParam::dtype).Required().Describe("the output's type");
      return s;
    }();
    return *schema;
  }
};

// out (per req) = in converted to out's type. kAddTo converts into temp space first.
absl::Status CastWithReq(const OpContext& ctx, const TBlob& in, const TBlob& out, OpReqType req) {
  switch (req) {
    case OpReqType::kNullOp:
      return absl::OkStatus();
    case OpReqType::kWriteTo:
    case OpReqType::kWriteInplace:
      if (in.dtype == out.dtype) return array_internal::CopyBlob(in, out, req, "Cast");
      return math::Cast(in, out);
    case OpReqType::kAddTo: {
      ASSIGN_OR_RETURN(void* space, ctx.requested.at(0).get_space(out.Bytes()));
      const TBlob converted(space, out.shape, out.dtype, out.ctx);
      RETURN_IF_ERROR(math::Cast(in, converted));
      return array_internal::CopyBlob(converted, out, req, "Cast");
    }
  }
  return absl::OkStatus();
}

class CastOp : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>&) override {
    return CastWithReq(ctx, in_data[0], out_data[0], req[0]);
  }
  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    return CastWithReq(ctx, out_grad[0], in_grad[0], req[0]);
  }
};

template <bool kAmp>
class CastProp : public PropertyWithParam<CastProp<kAmp>, CastParam> {
 public:
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>*) const override {
    RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[0], in_shape));
    if (!(*in_shape)[0].is_known()) return false;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, (*in_shape)[0], out_shape));
    return true;
  }
  // The output's type is the parameter; the input may be of any type, known or not.
  absl::StatusOr<bool> InferType(std::vector<DType>* in_type, std::vector<DType>* out_type,
                                 std::vector<DType>*) const override {
    const DType target = this->param_.dtype;
    if (!IsValidDType(static_cast<int>(target))) {
      return absl::InvalidArgumentError(absl::StrCat(TypeString(), ": dtype is not set"));
    }
    if ((*out_type)[0] != DType::kUnknown && (*out_type)[0] != target) {
      return absl::InvalidArgumentError(absl::StrCat(TypeString(), ": output is ",
                                                     DTypeName((*out_type)[0]), ", not dtype ",
                                                     DTypeName(target)));
    }
    (*out_type)[0] = target;
    return (*in_type)[0] != DType::kUnknown;
  }
  // Backward converts the output's gradient: it reads neither input nor output.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>&) const override {
    return {ResourceRequest{ResourceRequest::kTempSpace}};
  }
  std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>&) const override {
    return {ResourceRequest{ResourceRequest::kTempSpace}};
  }
  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    RETURN_IF_ERROR(array_internal::CheckCpu(TypeString(), ctx));
    return std::make_unique<CastOp>();
  }
  std::string TypeString() const override { return kAmp ? "amp_cast" : "Cast"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(Cast, CastProp<false>)
    .Describe("The input converted to dtype; the gradient converted back to the input's type.")
    .AddAlias("cast")
    .AddParams<CastParam>();
TESSERA_REGISTER_OP_PROPERTY(amp_cast, CastProp<true>)
    .Describe("Cast as the mixed-precision pass inserts it (graph/amp.h).")
    .AddParams<CastParam>();

}  // namespace tessera::ops

// ElementWiseSum (also registered as add_n): out = arg0 + arg1 + ... + arg<n-1>, all of one
// shape, as MXNet's src/operator/elementwise_sum-inl.h. The sum is taken in AccType per
// element (float for the half types); the backward hands out_grad to every argument.
// Every dtype is supported.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/array/internal/array_util.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

// MXNet 1.9's ElementWiseSumParam (src/operator/tensor/elemwise_sum.cc, add_n and its
// alias ElementWiseSum), its one field: num_args.
struct ElementWiseSumParam {
  int num_args = 0;

  static const ParamSchema<ElementWiseSumParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<ElementWiseSumParam>("ElementWiseSum");
      s->Field("num_args", &ElementWiseSumParam::num_args)
          .Required()
          .Lower(1)
          .Describe("number of arrays to add");
      return s;
    }();
    return *schema;
  }
};

template <typename T>
void SumKernel(const std::vector<TBlob>& in, const TBlob& out, OpReqType req) {
  using A = AccType<T>;
  const int64_t n = out.Size();
  std::vector<const T*> src;
  for (const TBlob& b : in) src.push_back(b.data<T>());
  T* y = out.data<T>();
  if (src.size() == 1) {
    array_internal::CopyWithReq(src[0], y, n, req);
    return;
  }
  // Pairs first: two streams per loop vectorize well, and every input is read before
  // out[i] is written, which keeps out == arg0 (in place) correct.
  const T* a = src[0];
  const T* b = src[1];
  if (src.size() == 2) {
    array_internal::MapWithReq(
        y, n, req, [&](int64_t i) { return static_cast<A>(a[i]) + static_cast<A>(b[i]); });
    return;
  }
  std::vector<A> acc(n);
  for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<A>(a[i]) + static_cast<A>(b[i]);
  for (size_t k = 2; k < src.size(); ++k) {
    const T* s = src[k];
    for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<A>(s[i]);
  }
  array_internal::MapWithReq(y, n, req, [&](int64_t i) { return acc[i]; });
}

class ElementWiseSumOp : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    absl::Status status;
    TESSERA_TYPE_SWITCH(
        out_data[0].dtype, T, SumKernel<T>(in_data, out_data[0], req[0]),
        status = array_internal::UnsupportedDType("ElementWiseSum", out_data[0].dtype, false));
    return status;
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    // in_grad[0] may share out_grad's memory (BackwardInplaceOption); a copy onto itself is
    // skipped and never changes out_grad, so the other copies still read the original.
    for (size_t i = 0; i < in_grad.size(); ++i) {
      RETURN_IF_ERROR(array_internal::CopyBlob(out_grad[0], in_grad[i], req[i], "ElementWiseSum"));
    }
    return absl::OkStatus();
  }
};

class ElementWiseSumProp : public PropertyWithParam<ElementWiseSumProp, ElementWiseSumParam> {
 public:
  std::vector<std::string> ListArguments() const override {
    return array_internal::NumberedNames("arg", param_.num_args);
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    // One shape for all: gather what anyone knows into the output, then hand it back out.
    for (int i = 0; i < param_.num_args; ++i) {
      absl::Status status = MergeShape((*in_shape)[i], &(*out_shape)[0], "the output");
      if (!status.ok()) {
        // Name the argument that disagrees with what the earlier ones (or the output) said.
        return absl::InvalidArgumentError(absl::StrCat(
            "ElementWiseSum: argument '", ListArguments()[i], "' has shape ",
            (*in_shape)[i].ToString(), " but the other arguments or the output have shape ",
            (*out_shape)[0].ToString()));
      }
    }
    for (int i = 0; i < param_.num_args; ++i) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, i, (*out_shape)[0], in_shape));
    }
    return (*out_shape)[0].is_known();
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0]};
  }
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>& in_data,
      const std::vector<int>& out_data, const std::vector<int>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<ElementWiseSumOp>();
  }
  std::string TypeString() const override { return "ElementWiseSum"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(ElementWiseSum, ElementWiseSumProp)
    .Describe("Adds num_args arrays of one shape element-wise.")
    .AddParams<ElementWiseSumParam>();
TESSERA_REGISTER_OP_PROPERTY(add_n, ElementWiseSumProp)
    .Describe("Adds num_args arrays of one shape element-wise (alias of ElementWiseSum).")
    .AddParams<ElementWiseSumParam>();

}  // namespace tessera::ops

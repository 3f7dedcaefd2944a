// Concat: joins num_args arrays along axis `dim`; every other dimension must agree. As
// MXNet's src/operator/concat-inl.h, the arguments are arg0 .. arg<n-1> and the backward
// splits out_grad back into the pieces. Every dtype is supported.
//
// Shape inference also runs backwards where it can: the non-concatenated dimensions of any
// argument or the output fix them for all, and when exactly one argument's size along `dim`
// is unknown, the output's size determines it.
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

// MXNet 1.9's ConcatParam (src/operator/nn/concat-inl.h), both fields: num_args, dim.
struct ConcatParam {
  int num_args = 0;
  int dim = 1;

  static const ParamSchema<ConcatParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<ConcatParam>("Concat");
      s->Field("num_args", &ConcatParam::num_args)
          .Required()
          .Lower(1)
          .Describe("number of arrays to join");
      s->Field("dim", &ConcatParam::dim).Describe("the axis to join along (negative from the end)");
      return s;
    }();
    return *schema;
  }
};

// Moves the pieces between the joined array and the parts: join when `to_joined`, else
// split. `axis` is normalized; the parts differ only along it.
template <typename T>
void JoinOrSplit(const std::vector<TBlob>& parts, const TBlob& joined, int axis, bool to_joined,
                 const std::vector<OpReqType>& req) {
  const Shape& shape = joined.shape;
  const int64_t outer = shape.ProdRange(0, axis);
  const int64_t inner = shape.ProdRange(axis + 1, shape.ndim());
  const int64_t row = shape[axis] * inner;
  T* whole = joined.data<T>();
  int64_t offset = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const int64_t block = parts[k].shape[axis] * inner;
    T* part = parts[k].data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      if (to_joined) {
        array_internal::CopyWithReq(part + o * block, whole + o * row + offset, block, req[0]);
      } else {
        array_internal::CopyWithReq(whole + o * row + offset, part + o * block, block, req[k]);
      }
    }
    offset += block;
  }
}

class ConcatOp : public Operator {
 public:
  explicit ConcatOp(ConcatParam param) : param_(param) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    return Run(in_data, out_data[0], true, req);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    return Run(in_grad, out_grad[0], false, req);
  }

 private:
  absl::Status Run(const std::vector<TBlob>& parts, const TBlob& joined, bool to_joined,
                   const std::vector<OpReqType>& req) {
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(param_.dim, joined.ndim()));
    absl::Status status;
    TESSERA_TYPE_SWITCH(joined.dtype, T, JoinOrSplit<T>(parts, joined, axis, to_joined, req),
                        status = array_internal::UnsupportedDType("Concat", joined.dtype, false));
    return status;
  }

  ConcatParam param_;
};

class ConcatProp : public PropertyWithParam<ConcatProp, ConcatParam> {
 public:
  std::vector<std::string> ListArguments() const override {
    return array_internal::NumberedNames("arg", param_.num_args);
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const int n = param_.num_args;
    const std::vector<std::string> names = ListArguments();
    // Every shape we know something of, with how to name it; the output last.
    std::vector<std::pair<const Shape*, std::string>> known;
    for (int i = 0; i < n; ++i) {
      if ((*in_shape)[i].ndim() > 0) {
        known.push_back({&(*in_shape)[i], absl::StrCat("argument '", names[i], "'")});
      }
    }
    if ((*out_shape)[0].ndim() > 0) known.push_back({&(*out_shape)[0], "the output"});
    if (known.empty()) return false;
    const int ndim = known[0].first->ndim();
    absl::StatusOr<int> normalized = NormalizeAxis(param_.dim, ndim);
    if (!normalized.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Concat: dim ", param_.dim, " of ", known[0].second, " with shape ",
                       known[0].first->ToString(), ": ", normalized.status().message()));
    }
    const int axis = *normalized;

    // The dimensions off the axis: one value for all, from whoever knows it.
    Shape common(known[0].first->begin(), known[0].first->end());
    std::vector<size_t> source(ndim, 0);  // which entry of `known` set common[d]
    for (int d = 0; d < ndim; ++d) common[d] = 0;
    for (size_t k = 0; k < known.size(); ++k) {
      const Shape& s = *known[k].first;
      if (s.ndim() != ndim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Concat: ", known[k].second, " has shape ", s.ToString(), " but ", known[0].second,
            " has shape ", known[0].first->ToString(), ": all must have the same rank"));
      }
      for (int d = 0; d < ndim; ++d) {
        if (d == axis || s[d] == 0) continue;
        if (common[d] == 0) {
          common[d] = s[d];
          source[d] = k;
        } else if (common[d] != s[d]) {
          const auto& [other, other_name] = known[source[d]];
          return absl::InvalidArgumentError(
              absl::StrCat("Concat: ", known[k].second, " has shape ", s.ToString(), " but ",
                           other_name, " has shape ", other->ToString(),
                           ": all dimensions except dim ", axis, " must agree"));
        }
      }
    }

    // The axis: the output's size is the sum of the arguments'; one unknown term can be
    // solved for.
    int64_t sum = 0;
    int unknown = 0, unknown_at = -1;
    for (int i = 0; i < n; ++i) {
      const Shape& s = (*in_shape)[i];
      if (s.ndim() == 0 || s[axis] == 0) {
        ++unknown;
        unknown_at = i;
      } else {
        sum += s[axis];
      }
    }
    const int64_t out_axis = (*out_shape)[0].ndim() > 0 ? (*out_shape)[0][axis] : 0;
    for (int i = 0; i < n; ++i) {
      Shape s = common;
      if ((*in_shape)[i].ndim() > 0) s[axis] = (*in_shape)[i][axis];
      if (unknown == 1 && i == unknown_at && out_axis > 0) {
        if (out_axis <= sum) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Concat: the output has shape ", (*out_shape)[0].ToString(),
              " but the known arguments already have ", sum, " elements along dim ", axis));
        }
        s[axis] = out_axis - sum;
        sum = out_axis;
        unknown = 0;
      }
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, i, s, in_shape));
    }
    Shape out = common;
    out[axis] = unknown == 0 ? sum : 0;
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, out, out_shape));
    for (const Shape& s : *in_shape) {
      if (!s.is_known()) return false;
    }
    return (*out_shape)[0].is_known();
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<ConcatOp>(param_);
  }
  std::string TypeString() const override { return "Concat"; }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(Concat, ConcatProp)
    .Describe("Joins num_args arrays (arg0, arg1, ...) along axis `dim`.")
    .AddParams<ConcatParam>()
    .AddAlias("concat");

}  // namespace tessera::ops

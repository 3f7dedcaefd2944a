// The axis reductions of MXNet: sum, mean, max, min, prod, with parameters
//   axis     tuple of axes (negative from the end); empty (the default) reduces every axis
//   keepdims keep reduced axes as size 1
//   exclude  reduce over the axes NOT listed
// Forward is //ndarray:math's Reduce. Backward broadcasts out_grad back over the reduced axes:
// sum as is, mean divided by the count, prod times out/data (as MXNet: a zero in the data
// gives a non-finite gradient), and max/min only to the positions equal to the result - every
// tied position receives the full gradient, as in MXNet's `ograd * (data == out)`.
// Backward supports the floating dtypes; forward every dtype.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ndarray/math.h"
#include "ops/operator.h"
#include "ops/param.h"
#include "ops/registry.h"
#include "ops/tensor/internal/broadcast_index.h"

namespace tessera::ops {
namespace {

using math::ReduceOp;
using tensor_internal::ForEachBroadcast;

constexpr const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProd:
      return "prod";
  }
  return "reduce";
}

// MXNet 1.9's ReduceAxesParam (src/operator/tensor/broadcast_reduce_op.h; sum, mean, prod,
// max, min), all 3 fields: axis (an optional tuple: None and () both reduce every axis),
// keepdims, exclude. All implemented.
struct ReduceAxesParam {
  std::vector<int> axis;
  bool keepdims = false;
  bool exclude = false;
};

template <ReduceOp kOp>
struct ReduceParamFor : ReduceAxesParam {
  static const ParamSchema<ReduceAxesParam>& Schema() {
    static const auto* schema = [] {
      auto* s = new ParamSchema<ReduceAxesParam>(ReduceOpName(kOp));
      s->Field("axis", &ReduceAxesParam::axis)
          .Describe("axes to reduce, e.g. (0,-1); empty reduces all");
      s->Field("keepdims", &ReduceAxesParam::keepdims)
          .Describe("keep the reduced axes with size 1");
      s->Field("exclude", &ReduceAxesParam::exclude).Describe("reduce over the axes not in `axis`");
      return s;
    }();
    return *schema;
  }
};

// What a reduction of `in` does: the axes reduced (sorted), the output shape, and the
// output's shape with reduced axes kept as 1 (how out_grad broadcasts back).
struct ReducePlan {
  std::vector<int> axes;
  Shape out;
  Shape keep;
};

absl::StatusOr<ReducePlan> PlanReduce(const char* op, const ReduceAxesParam& p, const Shape& in) {
  const int nd = in.ndim();
  std::vector<bool> listed(nd, false);
  for (int axis : p.axis) {
    absl::StatusOr<int> a = NormalizeAxis(axis, nd);
    if (!a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": parameter axis=(", absl::StrJoin(p.axis, ","), ") is invalid for data of shape ",
          in.ToString(), ": ", a.status().message()));
    }
    if (listed[*a]) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": parameter axis=(", absl::StrJoin(p.axis, ","), ") names axis ", *a, " twice"));
    }
    listed[*a] = true;
  }
  ReducePlan plan;
  for (int d = 0; d < nd; ++d) {
    // As in MXNet, an empty axis tuple reduces everything, with or without exclude.
    const bool reduced = p.axis.empty() || (listed[d] != p.exclude);
    if (reduced) {
      plan.axes.push_back(d);
      plan.keep.push_back(1);
      if (p.keepdims) plan.out.push_back(1);
    } else {
      plan.keep.push_back(in[d]);
      plan.out.push_back(in[d]);
    }
  }
  if (plan.out.ndim() == 0) plan.out = Shape{1};
  return plan;
}

template <ReduceOp kOp>
class ReduceOperator : public Operator {
 public:
  explicit ReduceOperator(ReduceAxesParam param) : param_(std::move(param)) {}

  absl::Status Forward(const OpContext&, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>&) override {
    ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce(ReduceOpName(kOp), param_, in_data[0].shape));
    // Nothing to reduce (exclude listed every axis): the identity, which Reduce's "empty
    // axes = all" cannot express.
    if (plan.axes.empty())
      return math::Copy(in_data[0], req[0], out_data[0].Reshaped(in_data[0].shape));
    return math::Reduce(kOp, in_data[0], plan.axes, req[0], out_data[0]);
  }

  absl::Status Backward(const OpContext&, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>&) override {
    const TBlob& ig = in_grad[0];
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    if (!IsFloatingPoint(ig.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          ReduceOpName(kOp), ": backward needs a floating dtype, got ", DTypeName(ig.dtype)));
    }
    ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce(ReduceOpName(kOp), param_, ig.shape));
    const TBlob og = out_grad[0].Reshaped(plan.keep);
    // sum and mean read only out_grad; the input's blob may be empty then.
    const double count = static_cast<double>(ig.Size()) / static_cast<double>(og.Size());
    const double scale = kOp == ReduceOp::kMean ? 1.0 / count : 1.0;
    constexpr bool kNeedsData = kOp != ReduceOp::kSum && kOp != ReduceOp::kMean;
    absl::Status status = absl::OkStatus();
    TESSERA_FLOAT_TYPE_SWITCH(
        ig.dtype, DT,
        {
          using A = AccType<DT>;
          [[maybe_unused]] const DT* x = kNeedsData ? in_data[0].data<DT>() : nullptr;
          [[maybe_unused]] const DT* y = kNeedsData ? out_data[0].data<DT>() : nullptr;
          const DT* g = og.data<DT>();
          DT* dx = ig.data<DT>();
          const OpReqType r = req[0];
          [[maybe_unused]] const A s = static_cast<A>(scale);
          ForEachBroadcast(ig.shape, ig.shape, plan.keep, [&](int64_t i, int64_t, int64_t o) {
            const A go = static_cast<A>(g[o]);
            A v;
            if constexpr (kOp == ReduceOp::kProd) {
              v = go * static_cast<A>(y[o]) / static_cast<A>(x[i]);
            } else if constexpr (kNeedsData) {
              v = static_cast<A>(x[i]) == static_cast<A>(y[o]) ? go : A(0);
            } else {
              v = go * s;
            }
            Assign(dx + i, r, v);
          });
        },
        status = absl::InvalidArgumentError("unsupported dtype"));
    return status;
  }

 private:
  ReduceAxesParam param_;
};

template <ReduceOp kOp>
class ReduceProp : public PropertyWithParam<ReduceProp<kOp>, ReduceParamFor<kOp>> {
 public:
  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const Shape& in = (*in_shape)[0];
    if (!in.is_known()) return false;
    ASSIGN_OR_RETURN(ReducePlan plan, PlanReduce(ReduceOpName(kOp), this->param_, in));
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, plan.out, out_shape));
    return true;
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    if (kOp == ReduceOp::kSum || kOp == ReduceOp::kMean) return {out_grad[0]};
    return {out_grad[0], in_data[0], out_data[0]};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<ReduceOperator<kOp>>(this->param_);
  }

  std::string TypeString() const override { return ReduceOpName(kOp); }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(sum, ReduceProp<ReduceOp::kSum>)
    .Describe("Sum over the given axes.")
    .AddParams<ReduceParamFor<ReduceOp::kSum>>()
    .AddAlias("sum_axis");
TESSERA_REGISTER_OP_PROPERTY(mean, ReduceProp<ReduceOp::kMean>)
    .Describe("Mean over the given axes.")
    .AddParams<ReduceParamFor<ReduceOp::kMean>>();
TESSERA_REGISTER_OP_PROPERTY(max, ReduceProp<ReduceOp::kMax>)
    .Describe(
        "Maximum over the given axes (NaN propagates); the gradient goes to every "
        "position equal to the maximum.")
    .AddParams<ReduceParamFor<ReduceOp::kMax>>()
    .AddAlias("max_axis");
TESSERA_REGISTER_OP_PROPERTY(min, ReduceProp<ReduceOp::kMin>)
    .Describe(
        "Minimum over the given axes (NaN propagates); the gradient goes to every "
        "position equal to the minimum.")
    .AddParams<ReduceParamFor<ReduceOp::kMin>>()
    .AddAlias("min_axis");
TESSERA_REGISTER_OP_PROPERTY(prod, ReduceProp<ReduceOp::kProd>)
    .Describe("Product over the given axes.")
    .AddParams<ReduceParamFor<ReduceOp::kProd>>();

}  // namespace tessera::ops

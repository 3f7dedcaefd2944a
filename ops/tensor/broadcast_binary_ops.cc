// The broadcasting binary operators of MXNet: broadcast_add, broadcast_sub, broadcast_mul,
// broadcast_div, broadcast_maximum, broadcast_minimum, broadcast_power. Arguments lhs and rhs
// broadcast with NumPy rules; forward is //ndarray:math's BroadcastBinary, and backward sums
// each input's gradient back to its shape with SumToShape (the gradient of broadcasting).
// MXNet 1.9 declares no parameters for them (src/operator/tensor/
// elemwise_binary_broadcast_op_*.cc); broadcast_plus and broadcast_minus are its aliases.
//
// Gradients: add/sub need only out_grad; the others need both inputs. maximum/minimum send the
// gradient to lhs where lhs >= rhs (<= for minimum) and to rhs elsewhere, so a tie goes to
// lhs only, as in MXNet. power's rhs gradient is out_grad * lhs^rhs * ln(lhs): NaN for lhs <= 0.
// Backward supports the floating dtypes; forward every dtype.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ndarray/math.h"
#include "ops/operator.h"
#include "ops/registry.h"
#include "ops/tensor/internal/broadcast_index.h"

namespace tessera::ops {
namespace {

using math::BinaryOp;
using tensor_internal::ForEachBroadcast;

constexpr const char* BroadcastOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "broadcast_add";
    case BinaryOp::kSub:
      return "broadcast_sub";
    case BinaryOp::kMul:
      return "broadcast_mul";
    case BinaryOp::kDiv:
      return "broadcast_div";
    case BinaryOp::kPow:
      return "broadcast_power";
    case BinaryOp::kMax:
      return "broadcast_maximum";
    case BinaryOp::kMin:
      return "broadcast_minimum";
  }
  return "broadcast_?";
}

// The per-element gradients (d out/d lhs, d out/d rhs) times g, in the compute type.
template <BinaryOp kOp, typename A>
inline void ElementGrad(A g, A a, A b, A* gl, A* gr) {
  if constexpr (kOp == BinaryOp::kMul) {
    *gl = g * b;
    *gr = g * a;
  } else if constexpr (kOp == BinaryOp::kDiv) {
    *gl = g / b;
    *gr = -g * a / (b * b);
  } else if constexpr (kOp == BinaryOp::kPow) {
    *gl = g * b * std::pow(a, b - A(1));
    *gr = g * std::pow(a, b) * std::log(a);
  } else if constexpr (kOp == BinaryOp::kMax) {
    *gl = a >= b ? g : A(0);
    *gr = a >= b ? A(0) : g;
  } else if constexpr (kOp == BinaryOp::kMin) {
    *gl = a <= b ? g : A(0);
    *gr = a <= b ? A(0) : g;
  }
}

template <BinaryOp kOp>
class BroadcastBinaryOperator : public Operator {
 public:
  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    return math::BroadcastBinary(kOp, in_data[0], in_data[1], req[0], out_data[0]);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    const TBlob& og = out_grad[0];
    if (!IsFloatingPoint(og.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          BroadcastOpName(kOp), ": backward needs a floating dtype, got ", DTypeName(og.dtype)));
    }
    if (ctx.requested.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(BroadcastOpName(kOp), ": backward needs its temp space resource"));
    }
    // Temporaries of out's shape: the unreduced gradients, computed completely before any
    // in_grad is written, so an in_grad sharing out_grad's memory is safe.
    const size_t bytes = og.Bytes();
    ASSIGN_OR_RETURN(void* space, ctx.requested[0].get_space(2 * bytes + 16));
    TBlob tl(space, og.shape, og.dtype);
    TBlob tr(static_cast<char*>(space) + bytes, og.shape, og.dtype);

    if constexpr (kOp == BinaryOp::kAdd || kOp == BinaryOp::kSub) {
      // lhs first: when in_grad[0] shares out_grad, it holds out_grad's values unchanged.
      RETURN_IF_ERROR(math::SumToShape(og, req[0], in_grad[0]));
      if (kOp == BinaryOp::kAdd) return math::SumToShape(og, req[1], in_grad[1]);
      if (req[1] == OpReqType::kNullOp) return absl::OkStatus();
      RETURN_IF_ERROR(math::BinaryScalar(BinaryOp::kMul, og, -1, false, OpReqType::kWriteTo, tr));
      return math::SumToShape(tr, req[1], in_grad[1]);
    } else {
      const TBlob& lhs = in_data[0];
      const TBlob& rhs = in_data[1];
      absl::Status status = absl::OkStatus();
      TESSERA_FLOAT_TYPE_SWITCH(
          og.dtype, DT,
          {
            using A = AccType<DT>;
            const DT* g = og.data<DT>();
            const DT* a = lhs.data<DT>();
            const DT* b = rhs.data<DT>();
            DT* pl = tl.data<DT>();
            DT* pr = tr.data<DT>();
            ForEachBroadcast(og.shape, lhs.shape, rhs.shape,
                             [&](int64_t i, int64_t ia, int64_t ib) {
                               A gl, gr;
                               ElementGrad<kOp, A>(static_cast<A>(g[i]), static_cast<A>(a[ia]),
                                                   static_cast<A>(b[ib]), &gl, &gr);
                               pl[i] = static_cast<DT>(gl);
                               pr[i] = static_cast<DT>(gr);
                             });
          },
          status = absl::InvalidArgumentError("unsupported dtype"));
      RETURN_IF_ERROR(status);
      RETURN_IF_ERROR(math::SumToShape(tl, req[0], in_grad[0]));
      return math::SumToShape(tr, req[1], in_grad[1]);
    }
  }
};

template <BinaryOp kOp>
class BroadcastBinaryProp : public PropertyWithParam<BroadcastBinaryProp<kOp>, NoParam> {
 public:
  std::vector<std::string> ListArguments() const override { return {"lhs", "rhs"}; }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    const Shape& lhs = (*in_shape)[0];
    const Shape& rhs = (*in_shape)[1];
    // Broadcasting cannot be inverted: without both inputs there is nothing to infer.
    if (!lhs.is_known() || !rhs.is_known()) return false;
    absl::StatusOr<Shape> out = BroadcastShapes(lhs, rhs);
    if (!out.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(TypeString(), ": arguments 'lhs' ",
                                                     lhs.ToString(), " and 'rhs' ", rhs.ToString(),
                                                     " cannot be broadcast together"));
    }
    RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, *out, out_shape));
    return true;
  }

  std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>&) const override {
    return {ResourceRequest{ResourceRequest::kTempSpace}};
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    if (kOp == BinaryOp::kAdd || kOp == BinaryOp::kSub) return {out_grad[0]};
    return {out_grad[0], in_data[0], in_data[1]};
  }

  // Valid when the two have the same size (the memory planner checks; the kernels are
  // alias-safe for same-shaped operands).
  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    return {{in_data[0], out_data[0]}, {in_data[1], out_data[0]}};
  }
  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>&, const std::vector<int>&,
      const std::vector<int>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}, {out_grad[0], in_grad[1]}};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // from ops/cuda, when built
    return std::make_unique<BroadcastBinaryOperator<kOp>>();
  }

  std::string TypeString() const override { return BroadcastOpName(kOp); }
};

}  // namespace

TESSERA_REGISTER_OP_PROPERTY(broadcast_add, BroadcastBinaryProp<BinaryOp::kAdd>)
    .Describe("lhs + rhs with NumPy broadcasting.")
    .AddAlias("broadcast_plus");
TESSERA_REGISTER_OP_PROPERTY(broadcast_sub, BroadcastBinaryProp<BinaryOp::kSub>)
    .Describe("lhs - rhs with NumPy broadcasting.")
    .AddAlias("broadcast_minus");
TESSERA_REGISTER_OP_PROPERTY(broadcast_mul, BroadcastBinaryProp<BinaryOp::kMul>)
    .Describe("lhs * rhs with NumPy broadcasting.");
TESSERA_REGISTER_OP_PROPERTY(broadcast_div, BroadcastBinaryProp<BinaryOp::kDiv>)
    .Describe("lhs / rhs with NumPy broadcasting; integer division by zero gives 0.");
TESSERA_REGISTER_OP_PROPERTY(broadcast_power, BroadcastBinaryProp<BinaryOp::kPow>)
    .Describe("lhs ** rhs with NumPy broadcasting.");
TESSERA_REGISTER_OP_PROPERTY(broadcast_maximum, BroadcastBinaryProp<BinaryOp::kMax>)
    .Describe(
        "Elementwise maximum with NumPy broadcasting (NaN propagates); ties send the "
        "gradient to lhs.");
TESSERA_REGISTER_OP_PROPERTY(broadcast_minimum, BroadcastBinaryProp<BinaryOp::kMin>)
    .Describe(
        "Elementwise minimum with NumPy broadcasting (NaN propagates); ties send the "
        "gradient to lhs.");

}  // namespace tessera::ops

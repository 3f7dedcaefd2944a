// smooth_l1, implemented through SimpleOp exactly as the seeds walk through it: a unary
// function with a scalar (sigma), a gradient of kind T2 (it needs the input), and the output
// gradient's memory reusable for the input gradient.
//
//   f(x) = 0.5 * (sigma * x)^2    if |x| < 1 / sigma^2
//          |x| - 0.5 / sigma^2    otherwise
//
// Parameters: MXNet 1.9's scalar and is_int (ScalarParam, ops/simple_op.h).
#include <cmath>

#include "ops/elemwise/map.h"
#include "ops/simple_op.h"

namespace tessera::ops::elemwise {
namespace {

absl::Status SmoothL1Forward(const TBlob& src, const EnvArguments& env, TBlob* ret,
                             OpReqType req, RunContext) {
  const double sigma2 = env.scalar * env.scalar;
  return Map("smooth_l1", src, *ret, req, [sigma2](auto x) -> decltype(x) {
    using A = decltype(x);
    const A s2 = static_cast<A>(sigma2);
    if (x > A(1) / s2) return x - A(0.5) / s2;
    if (x < A(-1) / s2) return -x - A(0.5) / s2;
    return A(0.5) * x * x * s2;
  });
}

absl::Status SmoothL1BackwardUseIn(const OutputGrad& out_grad, const Input0& in_data0,
                                   const EnvArguments& env, TBlob* in_grad, OpReqType req,
                                   RunContext) {
  const double sigma2 = env.scalar * env.scalar;
  return Map("smooth_l1", out_grad.data, in_data0.data, *in_grad, req,
             [sigma2](auto g, auto x) -> decltype(x) {
               using A = decltype(x);
               const A s2 = static_cast<A>(sigma2);
               if (x > A(1) / s2) return g;
               if (x < A(-1) / s2) return -g;
               return g * x * s2;
             });
}

absl::StatusOr<Shape> SmoothL1Shape(const Shape& src, const EnvArguments& env) {
  if (env.scalar == 0) {
    return absl::InvalidArgumentError("smooth_l1: scalar (sigma) must be non-zero");
  }
  return src;
}

}  // namespace

TESSERA_REGISTER_SIMPLE_OP(smooth_l1, cpu)
    .set_shape_function(SmoothL1Shape)
    .set_function(DeviceType::kCPU, SmoothL1Forward, kNoInplace)
    .set_gradient(DeviceType::kCPU, SmoothL1BackwardUseIn, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("Smooth L1 loss of data with turning point 1/scalar^2 (scalar = sigma)");

}  // namespace tessera::ops::elemwise

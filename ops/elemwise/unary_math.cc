// Unary math functions as SimpleOps: negative, abs, square, sqrt, rsqrt, exp, log, sin, cos,
// reciprocal. Each gradient uses the cheapest dependency: the output value where f' is a
// function of f (exp, sqrt), the input otherwise. MXNet 1.9 declares no parameters for them
// (src/operator/tensor/elemwise_unary_op_*.cc).
#include <cmath>

#include "ops/elemwise/map.h"
#include "ops/simple_op.h"

namespace tessera::ops::elemwise {
namespace {

// Defines <Name>Forward and a gradient of kind T2 (from the input): g * dfdx(x).
#define TESSERA_UNARY_USE_IN(Name, fx, dfdx)                                                \
  absl::Status Name##Forward(const TBlob& src, const EnvArguments&, TBlob* ret,             \
                             OpReqType req, RunContext) {                                   \
    return Map(#Name, src, *ret, req, [](auto x) -> decltype(x) {                           \
      using std::abs, std::sqrt, std::exp, std::log, std::sin, std::cos;                    \
      return fx;                                                                            \
    });                                                                                     \
  }                                                                                         \
  absl::Status Name##Backward(const OutputGrad& og, const Input0& in, const EnvArguments&,  \
                              TBlob* in_grad, OpReqType req, RunContext) {                  \
    return Map(#Name, og.data, in.data, *in_grad, req, [](auto g, auto x) -> decltype(x) {  \
      using std::abs, std::sqrt, std::exp, std::log, std::sin, std::cos;                    \
      using A = decltype(x);                                                                \
      return g * static_cast<A>(dfdx);                                                      \
    });                                                                                     \
  }

// The same with a gradient of kind T1 (from the output value y).
#define TESSERA_UNARY_USE_OUT(Name, fx, dfdy)                                                   \
  absl::Status Name##Forward(const TBlob& src, const EnvArguments&, TBlob* ret,                 \
                             OpReqType req, RunContext) {                                       \
    return Map(#Name, src, *ret, req, [](auto x) -> decltype(x) {                               \
      using std::sqrt, std::exp;                                                                \
      return fx;                                                                                \
    });                                                                                         \
  }                                                                                             \
  absl::Status Name##Backward(const OutputGrad& og, const OutputValue& out, const EnvArguments&, \
                              TBlob* in_grad, OpReqType req, RunContext) {                      \
    return Map(#Name, og.data, out.data, *in_grad, req, [](auto g, auto y) -> decltype(y) {     \
      using A = decltype(y);                                                                    \
      return g * static_cast<A>(dfdy);                                                          \
    });                                                                                         \
  }

TESSERA_UNARY_USE_IN(abs, abs(x), x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0)))
TESSERA_UNARY_USE_IN(square, x * x, A(2) * x)
TESSERA_UNARY_USE_IN(log, log(x), A(1) / x)
TESSERA_UNARY_USE_IN(sin, sin(x), cos(x))
TESSERA_UNARY_USE_IN(cos, cos(x), -sin(x))
TESSERA_UNARY_USE_IN(rsqrt, decltype(x)(1) / sqrt(x), A(-0.5) / (x * sqrt(x)))
TESSERA_UNARY_USE_OUT(sqrt, sqrt(x), A(0.5) / y)
TESSERA_UNARY_USE_OUT(exp, exp(x), y)
TESSERA_UNARY_USE_OUT(reciprocal, decltype(x)(1) / x, -y * y)

#undef TESSERA_UNARY_USE_IN
#undef TESSERA_UNARY_USE_OUT

absl::Status NegativeForward(const TBlob& src, const EnvArguments&, TBlob* ret, OpReqType req,
                             RunContext) {
  return Map("negative", src, *ret, req, [](auto x) { return -x; });
}
absl::Status NegativeBackward(const OutputGrad& og, const EnvArguments&, TBlob* in_grad,
                              OpReqType req, RunContext) {
  return Map("negative", og.data, *in_grad, req, [](auto g) { return -g; });
}

}  // namespace

TESSERA_REGISTER_SIMPLE_OP(negative, cpu)
    .set_function(DeviceType::kCPU, NegativeForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, NegativeBackward, kInplaceOutIn)
    .describe("-x, elementwise");
TESSERA_REGISTER_SIMPLE_OP(abs, cpu)
    .set_function(DeviceType::kCPU, absForward, kNoInplace)  // its gradient reads x
    .set_gradient(DeviceType::kCPU, absBackward, kInplaceOutIn)
    .describe("|x|, elementwise (gradient 0 at 0)");
TESSERA_REGISTER_SIMPLE_OP(square, cpu)
    .set_function(DeviceType::kCPU, squareForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, squareBackward, kInplaceOutIn)
    .describe("x^2, elementwise");
TESSERA_REGISTER_SIMPLE_OP(log, cpu)
    .set_function(DeviceType::kCPU, logForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, logBackward, kInplaceOutIn)
    .describe("natural logarithm, elementwise");
TESSERA_REGISTER_SIMPLE_OP(sin, cpu)
    .set_function(DeviceType::kCPU, sinForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, sinBackward, kInplaceOutIn)
    .describe("sine, elementwise");
TESSERA_REGISTER_SIMPLE_OP(cos, cpu)
    .set_function(DeviceType::kCPU, cosForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, cosBackward, kInplaceOutIn)
    .describe("cosine, elementwise");
TESSERA_REGISTER_SIMPLE_OP(rsqrt, cpu)
    .set_function(DeviceType::kCPU, rsqrtForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, rsqrtBackward, kInplaceOutIn)
    .describe("1/sqrt(x), elementwise");
TESSERA_REGISTER_SIMPLE_OP(sqrt, cpu)
    .set_function(DeviceType::kCPU, sqrtForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, sqrtBackward, kInplaceOutIn)
    .describe("square root, elementwise");
TESSERA_REGISTER_SIMPLE_OP(exp, cpu)
    .set_function(DeviceType::kCPU, expForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, expBackward, kInplaceOutIn)
    .describe("e^x, elementwise");
TESSERA_REGISTER_SIMPLE_OP(reciprocal, cpu)
    .set_function(DeviceType::kCPU, reciprocalForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, reciprocalBackward, kInplaceOutIn)
    .describe("1/x, elementwise");

}  // namespace tessera::ops::elemwise

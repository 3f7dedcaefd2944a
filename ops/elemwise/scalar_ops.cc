// Arithmetic between an array and a scalar, as SimpleOps with set_enable_scalar:
// _plus_scalar, _minus_scalar (x - s), _rminus_scalar (s - x), _mul_scalar, _div_scalar
// (x / s), _rdiv_scalar (s / x), _power_scalar (x ^ s), _rpower_scalar (s ^ x).
// Parameters: MXNet 1.9's scalar and is_int (ScalarParam, ops/simple_op.h). Each also takes
// MXNet's CamelCase alias (_PlusScalar, ...), the name in 0.8's symbol files.
#include <cmath>

#include "ops/elemwise/map.h"
#include "ops/simple_op.h"

namespace tessera::ops::elemwise {
namespace {

// A scalar op whose gradient needs only the output gradient: d/dx = dfdx (a constant in s).
#define TESSERA_SCALAR_OP_T0(Name, fx, dfdx)                                                  \
  absl::Status Name##Forward(const TBlob& src, const EnvArguments& env, TBlob* ret,           \
                             OpReqType req, RunContext) {                                     \
    const double s = env.scalar;                                                              \
    return Map(#Name, src, *ret, req, [s](auto x) -> decltype(x) {                            \
      using A = decltype(x);                                                                  \
      return fx;                                                                              \
    });                                                                                       \
  }                                                                                           \
  absl::Status Name##Backward(const OutputGrad& og, const EnvArguments& env, TBlob* in_grad,  \
                              OpReqType req, RunContext) {                                    \
    const double s = env.scalar;                                                              \
    return Map(#Name, og.data, *in_grad, req, [s](auto g) -> decltype(g) {                    \
      using A = decltype(g);                                                                  \
      return g * static_cast<A>(dfdx);                                                        \
    });                                                                                       \
  }

TESSERA_SCALAR_OP_T0(_plus_scalar, x + A(s), 1)
TESSERA_SCALAR_OP_T0(_minus_scalar, x - A(s), 1)
TESSERA_SCALAR_OP_T0(_rminus_scalar, A(s) - x, -1)
TESSERA_SCALAR_OP_T0(_mul_scalar, x * A(s), s)
TESSERA_SCALAR_OP_T0(_div_scalar, x / A(s), 1.0 / s)
#undef TESSERA_SCALAR_OP_T0

absl::Status RDivForward(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req,
                         RunContext) {
  const double s = env.scalar;
  return Map("_rdiv_scalar", src, *ret, req, [s](auto x) { return decltype(x)(s) / x; });
}
// d(s/x)/dx = -s/x^2 = -y^2/s; from the input to stay exact for s == 0.
absl::Status RDivBackward(const OutputGrad& og, const Input0& in, const EnvArguments& env,
                          TBlob* in_grad, OpReqType req, RunContext) {
  const double s = env.scalar;
  return Map("_rdiv_scalar", og.data, in.data, *in_grad, req,
             [s](auto g, auto x) { return -g * decltype(x)(s) / (x * x); });
}

absl::Status PowerForward(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req,
                          RunContext) {
  const double s = env.scalar;
  return Map("_power_scalar", src, *ret, req, [s](auto x) { return std::pow(x, decltype(x)(s)); });
}
absl::Status PowerBackward(const OutputGrad& og, const Input0& in, const EnvArguments& env,
                           TBlob* in_grad, OpReqType req, RunContext) {
  const double s = env.scalar;
  return Map("_power_scalar", og.data, in.data, *in_grad, req, [s](auto g, auto x) {
    using A = decltype(x);
    return g * A(s) * std::pow(x, A(s - 1));
  });
}

absl::Status RPowerForward(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req,
                           RunContext) {
  const double s = env.scalar;
  return Map("_rpower_scalar", src, *ret, req, [s](auto x) { return std::pow(decltype(x)(s), x); });
}
// d(s^x)/dx = s^x * ln(s) = y * ln(s).
absl::Status RPowerBackward(const OutputGrad& og, const OutputValue& out, const EnvArguments& env,
                            TBlob* in_grad, OpReqType req, RunContext) {
  const double log_s = std::log(env.scalar);
  return Map("_rpower_scalar", og.data, out.data, *in_grad, req,
             [log_s](auto g, auto y) { return g * y * decltype(y)(log_s); });
}

}  // namespace

TESSERA_REGISTER_SIMPLE_OP(_plus_scalar, cpu)
    .set_function(DeviceType::kCPU, _plus_scalarForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, _plus_scalarBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("x + scalar")
    .add_alias("_PlusScalar");
TESSERA_REGISTER_SIMPLE_OP(_minus_scalar, cpu)
    .set_function(DeviceType::kCPU, _minus_scalarForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, _minus_scalarBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("x - scalar")
    .add_alias("_MinusScalar");
TESSERA_REGISTER_SIMPLE_OP(_rminus_scalar, cpu)
    .set_function(DeviceType::kCPU, _rminus_scalarForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, _rminus_scalarBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("scalar - x")
    .add_alias("_RMinusScalar");
TESSERA_REGISTER_SIMPLE_OP(_mul_scalar, cpu)
    .set_function(DeviceType::kCPU, _mul_scalarForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, _mul_scalarBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("x * scalar")
    .add_alias("_MulScalar");
TESSERA_REGISTER_SIMPLE_OP(_div_scalar, cpu)
    .set_function(DeviceType::kCPU, _div_scalarForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, _div_scalarBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("x / scalar")
    .add_alias("_DivScalar");
TESSERA_REGISTER_SIMPLE_OP(_rdiv_scalar, cpu)
    .set_function(DeviceType::kCPU, RDivForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, RDivBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("scalar / x")
    .add_alias("_RDivScalar");
TESSERA_REGISTER_SIMPLE_OP(_power_scalar, cpu)
    .set_function(DeviceType::kCPU, PowerForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, PowerBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("x ^ scalar")
    .add_alias("_PowerScalar");
TESSERA_REGISTER_SIMPLE_OP(_rpower_scalar, cpu)
    .set_function(DeviceType::kCPU, RPowerForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, RPowerBackward, kInplaceOutIn)
    .set_enable_scalar(true)
    .describe("scalar ^ x")
    .add_alias("_RPowerScalar");

}  // namespace tessera::ops::elemwise

// Elementwise arithmetic of two arrays of one shape, as binary SimpleOps: elemwise_add,
// elemwise_sub, elemwise_mul, elemwise_div. (Broadcasting versions are broadcast_*.)
// MXNet 1.9 declares no parameters for them (src/operator/tensor/elemwise_binary_op_basic.cc);
// its aliases (_Plus, _minus, ... the names of 0.8's symbol files) name them too.
#include "ops/elemwise/map.h"
#include "ops/simple_op.h"

namespace tessera::ops::elemwise {
namespace {

absl::Status AddForward(const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret,
                        OpReqType req, RunContext) {
  return Map("elemwise_add", lhs, rhs, *ret, req, [](auto a, auto b) { return a + b; });
}
absl::Status AddBackward(const OutputGrad& og, const EnvArguments&, TBlob* lhs_grad,
                         TBlob* rhs_grad, OpReqType req_lhs, OpReqType req_rhs, RunContext) {
  // rhs first: lhs_grad may share memory with out_grad (kInplaceOutLhs).
  if (absl::Status s = Map("elemwise_add", og.data, *rhs_grad, req_rhs, [](auto g) { return g; });
      !s.ok()) {
    return s;
  }
  return Map("elemwise_add", og.data, *lhs_grad, req_lhs, [](auto g) { return g; });
}

absl::Status SubForward(const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret,
                        OpReqType req, RunContext) {
  return Map("elemwise_sub", lhs, rhs, *ret, req, [](auto a, auto b) { return a - b; });
}
absl::Status SubBackward(const OutputGrad& og, const EnvArguments&, TBlob* lhs_grad,
                         TBlob* rhs_grad, OpReqType req_lhs, OpReqType req_rhs, RunContext) {
  if (absl::Status s = Map("elemwise_sub", og.data, *rhs_grad, req_rhs, [](auto g) { return -g; });
      !s.ok()) {
    return s;
  }
  return Map("elemwise_sub", og.data, *lhs_grad, req_lhs, [](auto g) { return g; });
}

absl::Status MulForward(const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret,
                        OpReqType req, RunContext) {
  return Map("elemwise_mul", lhs, rhs, *ret, req, [](auto a, auto b) { return a * b; });
}
absl::Status MulBackward(const OutputGrad& og, const Input0& lhs, const Input1& rhs,
                         const EnvArguments&, TBlob* lhs_grad, TBlob* rhs_grad,
                         OpReqType req_lhs, OpReqType req_rhs, RunContext) {
  if (absl::Status s = Map("elemwise_mul", og.data, lhs.data, *rhs_grad, req_rhs,
                           [](auto g, auto a) { return g * a; });
      !s.ok()) {
    return s;
  }
  return Map("elemwise_mul", og.data, rhs.data, *lhs_grad, req_lhs,
             [](auto g, auto b) { return g * b; });
}

absl::Status DivForward(const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret,
                        OpReqType req, RunContext) {
  return Map("elemwise_div", lhs, rhs, *ret, req, [](auto a, auto b) { return a / b; });
}
absl::Status DivBackward(const OutputGrad& og, const Input0& lhs, const Input1& rhs,
                         const EnvArguments&, TBlob* lhs_grad, TBlob* rhs_grad,
                         OpReqType req_lhs, OpReqType req_rhs, RunContext) {
  if (absl::Status s = Map("elemwise_div", og.data, lhs.data, rhs.data, *rhs_grad, req_rhs,
                           [](auto g, auto a, auto b) { return -g * a / (b * b); });
      !s.ok()) {
    return s;
  }
  return Map("elemwise_div", og.data, rhs.data, *lhs_grad, req_lhs,
             [](auto g, auto b) { return g / b; });
}

}  // namespace

TESSERA_REGISTER_SIMPLE_OP(elemwise_add, cpu)
    .set_function(DeviceType::kCPU, AddForward, kInplaceLhsOut)
    .set_gradient(DeviceType::kCPU, AddBackward, kInplaceOutLhs)
    .describe("lhs + rhs, elementwise, same shapes")
    .add_alias("_add")
    .add_alias("_plus")
    .add_alias("_Plus");
TESSERA_REGISTER_SIMPLE_OP(elemwise_sub, cpu)
    .set_function(DeviceType::kCPU, SubForward, kInplaceLhsOut)
    .set_gradient(DeviceType::kCPU, SubBackward, kInplaceOutLhs)
    .describe("lhs - rhs, elementwise, same shapes")
    .add_alias("_sub")
    .add_alias("_minus")
    .add_alias("_Minus");
TESSERA_REGISTER_SIMPLE_OP(elemwise_mul, cpu)
    .set_function(DeviceType::kCPU, MulForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, MulBackward, kInplaceOutLhs)
    .describe("lhs * rhs, elementwise, same shapes")
    .add_alias("_mul")
    .add_alias("_Mul");
TESSERA_REGISTER_SIMPLE_OP(elemwise_div, cpu)
    .set_function(DeviceType::kCPU, DivForward, kNoInplace)
    .set_gradient(DeviceType::kCPU, DivBackward, kInplaceOutLhs)
    .describe("lhs / rhs, elementwise, same shapes")
    .add_alias("_div")
    .add_alias("_Div");

}  // namespace tessera::ops::elemwise

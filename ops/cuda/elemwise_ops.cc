// GPU functions of the elementwise SimpleOps of ops/elemwise (smooth_l1, unary math, *_scalar,
// elemwise_add/sub/mul/div), added to the same entries as the CPU ones with the same gradient
// kinds and in-place options. Each is one LaunchMap (ops/cuda/kernels.h) on the run context's
// stream; float32 and float64 (the half types have no GPU kernel yet and are rejected).
#include <cmath>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_status.h"
#include "core/status_macros.h"
#include "ops/cuda/kernels.h"
#include "ops/simple_op.h"

namespace tessera::ops::cuda {
namespace {

absl::StatusOr<KernelType> CheckBlobs(const char* op, const TBlob& out,
                                      std::initializer_list<const TBlob*> ins) {
  if (!out.ctx.is_gpu()) {
    return absl::FailedPreconditionError(absl::StrCat(op, ": GPU kernel got ", out.ctx.ToString()));
  }
  for (const TBlob* in : ins) {
    if (in->dtype != out.dtype || in->Size() != out.Size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": operand ", in->shape.ToString(), " ", DTypeName(in->dtype),
                       " does not match ", out.shape.ToString(), " ", DTypeName(out.dtype)));
    }
  }
  if (out.dtype == DType::kFloat32) return KernelType::kFloat32;
  if (out.dtype == DType::kFloat64) return KernelType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat(op, ": dtype ", DTypeName(out.dtype),
                                                 " has no GPU kernel (float32, float64 only)"));
}

// out (per req) = code(a, b, c, s) elementwise.
absl::Status Run(const char* op, MapCode code, const TBlob& out, OpReqType req, RunContext ctx,
                 const TBlob* a, const TBlob* b = nullptr, const TBlob* c = nullptr, double s = 0) {
  if (req == OpReqType::kNullOp) return absl::OkStatus();
  std::initializer_list<const TBlob*> ins = {a};
  absl::StatusOr<KernelType> type =
      c != nullptr ? CheckBlobs(op, out, {a, b, c})
                   : (b != nullptr ? CheckBlobs(op, out, {a, b}) : CheckBlobs(op, out, ins));
  if (!type.ok()) return type.status();
  CUDA_RETURN_IF_ERROR(LaunchMap(code, *type, a->dptr, b ? b->dptr : nullptr, c ? c->dptr : nullptr,
                                 out.dptr, out.Size(), s, static_cast<int>(req),
                                 ctx.get_stream<cudaStream_t>()));
  return absl::OkStatus();
}

// Forward of a unary op with code `kCode`; the scalar is env.scalar.
template <MapCode kCode>
absl::Status UnaryForward(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req,
                          RunContext ctx) {
  return Run("elementwise", kCode, *ret, req, ctx, &src, nullptr, nullptr, env.scalar);
}

// Gradients of kind T2 / T1: code(g, x or y, scalar).
template <MapCode kCode>
absl::Status GradUseIn(const OutputGrad& og, const Input0& in, const EnvArguments& env,
                       TBlob* in_grad, OpReqType req, RunContext ctx) {
  return Run("elementwise gradient", kCode, *in_grad, req, ctx, &og.data, &in.data, nullptr,
             env.scalar);
}
template <MapCode kCode>
absl::Status GradUseOut(const OutputGrad& og, const OutputValue& out, const EnvArguments& env,
                        TBlob* in_grad, OpReqType req, RunContext ctx) {
  return Run("elementwise gradient", kCode, *in_grad, req, ctx, &og.data, &out.data, nullptr,
             env.scalar);
}

// Gradients of kind T0: g times a constant, a function of the scalar.
template <double (*kFactor)(double)>
absl::Status GradScale(const OutputGrad& og, const EnvArguments& env, TBlob* in_grad, OpReqType req,
                       RunContext ctx) {
  return Run("elementwise gradient", MapCode::kMulScalar, *in_grad, req, ctx, &og.data, nullptr,
             nullptr, kFactor(env.scalar));
}
double One(double) { return 1; }
double MinusOne(double) { return -1; }
double Same(double s) { return s; }
double Inverse(double s) { return 1.0 / s; }

absl::Status RPowerGrad(const OutputGrad& og, const OutputValue& out, const EnvArguments& env,
                        TBlob* in_grad, OpReqType req, RunContext ctx) {
  return Run("_rpower_scalar", MapCode::kRPowerGrad, *in_grad, req, ctx, &og.data, &out.data,
             nullptr, std::log(env.scalar));
}

template <MapCode kCode>
absl::Status BinaryForward(const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret,
                           OpReqType req, RunContext ctx) {
  return Run("elemwise binary", kCode, *ret, req, ctx, &lhs, &rhs);
}

// The rhs gradient first in all of these: lhs_grad may share memory with out_grad
// (kInplaceOutLhs), and kernels on one stream run in order.
template <double (*kRhsFactor)(double)>
absl::Status AddSubBackward(const OutputGrad& og, const EnvArguments&, TBlob* lhs_grad,
                            TBlob* rhs_grad, OpReqType req_lhs, OpReqType req_rhs, RunContext ctx) {
  RETURN_IF_ERROR(Run("elemwise add/sub", MapCode::kMulScalar, *rhs_grad, req_rhs, ctx, &og.data,
                      nullptr, nullptr, kRhsFactor(0)));
  return Run("elemwise add/sub", MapCode::kMulScalar, *lhs_grad, req_lhs, ctx, &og.data, nullptr,
             nullptr, 1.0);
}

absl::Status MulBackward(const OutputGrad& og, const Input0& lhs, const Input1& rhs,
                         const EnvArguments&, TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_lhs,
                         OpReqType req_rhs, RunContext ctx) {
  RETURN_IF_ERROR(Run("elemwise_mul", MapCode::kMul, *rhs_grad, req_rhs, ctx, &og.data, &lhs.data));
  return Run("elemwise_mul", MapCode::kMul, *lhs_grad, req_lhs, ctx, &og.data, &rhs.data);
}

absl::Status DivBackward(const OutputGrad& og, const Input0& lhs, const Input1& rhs,
                         const EnvArguments&, TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_lhs,
                         OpReqType req_rhs, RunContext ctx) {
  RETURN_IF_ERROR(Run("elemwise_div", MapCode::kDivRhsGrad, *rhs_grad, req_rhs, ctx, &og.data,
                      &lhs.data, &rhs.data));
  return Run("elemwise_div", MapCode::kDiv, *lhs_grad, req_lhs, ctx, &og.data, &rhs.data);
}

}  // namespace

constexpr DeviceType kGPU = DeviceType::kGPU;

TESSERA_REGISTER_SIMPLE_OP(smooth_l1, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kSmoothL1>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kSmoothL1Grad>, kInplaceOutIn);

TESSERA_REGISTER_SIMPLE_OP(negative, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kNegative>, kInplaceInOut)
    .set_gradient(kGPU, GradScale<MinusOne>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(abs, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kAbs>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kAbsGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(square, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kSquare>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kSquareGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(log, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kLog>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kLogGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(sin, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kSin>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kSinGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(cos, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kCos>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kCosGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(rsqrt, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kRsqrt>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kRsqrtGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(sqrt, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kSqrt>, kInplaceInOut)
    .set_gradient(kGPU, GradUseOut<MapCode::kSqrtGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(exp, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kExp>, kInplaceInOut)
    .set_gradient(kGPU, GradUseOut<MapCode::kExpGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(reciprocal, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kReciprocal>, kInplaceInOut)
    .set_gradient(kGPU, GradUseOut<MapCode::kReciprocalGrad>, kInplaceOutIn);

TESSERA_REGISTER_SIMPLE_OP(_plus_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kPlusScalar>, kInplaceInOut)
    .set_gradient(kGPU, GradScale<One>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_minus_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kMinusScalar>, kInplaceInOut)
    .set_gradient(kGPU, GradScale<One>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_rminus_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kRMinusScalar>, kInplaceInOut)
    .set_gradient(kGPU, GradScale<MinusOne>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_mul_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kMulScalar>, kInplaceInOut)
    .set_gradient(kGPU, GradScale<Same>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_div_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kDivScalar>, kInplaceInOut)
    .set_gradient(kGPU, GradScale<Inverse>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_rdiv_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kRDivScalar>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kRDivGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_power_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kPowerScalar>, kNoInplace)
    .set_gradient(kGPU, GradUseIn<MapCode::kPowerGrad>, kInplaceOutIn);
TESSERA_REGISTER_SIMPLE_OP(_rpower_scalar, gpu)
    .set_function(kGPU, UnaryForward<MapCode::kRPowerScalar>, kInplaceInOut)
    .set_gradient(kGPU, RPowerGrad, kInplaceOutIn);

TESSERA_REGISTER_SIMPLE_OP(elemwise_add, gpu)
    .set_function(kGPU, BinaryForward<MapCode::kAdd>, kInplaceLhsOut)
    .set_gradient(kGPU, AddSubBackward<One>, kInplaceOutLhs);
TESSERA_REGISTER_SIMPLE_OP(elemwise_sub, gpu)
    .set_function(kGPU, BinaryForward<MapCode::kSub>, kInplaceLhsOut)
    .set_gradient(kGPU, AddSubBackward<MinusOne>, kInplaceOutLhs);
TESSERA_REGISTER_SIMPLE_OP(elemwise_mul, gpu)
    .set_function(kGPU, BinaryForward<MapCode::kMul>, kNoInplace)
    .set_gradient(kGPU, MulBackward, kInplaceOutLhs);
TESSERA_REGISTER_SIMPLE_OP(elemwise_div, gpu)
    .set_function(kGPU, BinaryForward<MapCode::kDiv>, kNoInplace)
    .set_gradient(kGPU, DivBackward, kInplaceOutLhs);

}  // namespace tessera::ops::cuda

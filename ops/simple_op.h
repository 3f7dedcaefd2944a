// SimpleOp: the unified operator API from the seeds. One registration of a unary or binary
// function - its shape function, forward, gradient, in-place options, scalar or keyword
// arguments and resource requests - makes an operator that the graph layer uses as a symbol
// operator and that ops/imperative.h runs on NDArrays, through the same OperatorProperty.
//
//   TESSERA_REGISTER_SIMPLE_OP(smooth_l1, cpu)
//       .set_function(DeviceType::kCPU, SmoothL1Forward, kNoInplace)
//       .set_gradient(DeviceType::kCPU, SmoothL1BackwardUseIn, kInplaceOutIn)
//       .set_enable_scalar(true)
//       .describe("Smooth L1 loss of (data, scalar sigma)");
//
// Gradients come in three kinds, which decide the backward dependencies (and so what the
// executor must keep alive): T0 from the output gradient only, T1 with the output value, T2
// with the inputs. As in MXNet, registrations for different devices (a .cc and a .cu file)
// add to the same entry.
//
// Thread safety: entries are filled during static initialization and read-only afterwards.
#ifndef TESSERA_OPS_SIMPLE_OP_H_
#define TESSERA_OPS_SIMPLE_OP_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context.h"
#include "core/shape.h"
#include "core/tblob.h"
#include "engine/engine.h"
#include "ops/operator.h"
#include "ops/param.h"
#include "ops/registry.h"

namespace tessera::ops {

// The parameters of a SimpleOp with set_enable_scalar: MXNet 1.9's NumpyBinaryScalarParam
// (src/operator/tensor/elemwise_binary_scalar_op.h), both fields, for every scalar operator
// (_plus_scalar ... _rpower_scalar, smooth_l1). `scalar` is required here: MXNet 1.9
// defaults it to 1, but every MXNet writes it and those before 1.7 require it. `is_int`
// only picks MXNet's output type for integer data, which these kernels do not take
// (floating types only): accepted and ignored.
struct ScalarParam {
  double scalar = 0;
  bool is_int = true;
};

// What a SimpleOp function gets besides its operands.
struct EnvArguments {
  double scalar = 0;           // when set_enable_scalar(true)
  KwArgs kwargs;               // when set_enable_kwargs(true)
  std::vector<Resource> resource;  // the set_resource_request ones, in order
};

struct OutputGrad {
  TBlob data;
};
struct OutputValue {
  TBlob data;
};
struct Input0 {
  TBlob data;
};
struct Input1 {
  TBlob data;
};

using engine::RunContext;

using UnaryShapeFunction = absl::StatusOr<Shape> (*)(const Shape& src, const EnvArguments& env);
using BinaryShapeFunction = absl::StatusOr<Shape> (*)(const Shape& lhs, const Shape& rhs,
                                                      const EnvArguments& env);
using UnaryFunction = absl::Status (*)(const TBlob& src, const EnvArguments& env, TBlob* ret,
                                       OpReqType req, RunContext ctx);
using BinaryFunction = absl::Status (*)(const TBlob& lhs, const TBlob& rhs,
                                        const EnvArguments& env, TBlob* ret, OpReqType req,
                                        RunContext ctx);
using UnaryGradFunctionT0 = absl::Status (*)(const OutputGrad& out_grad, const EnvArguments& env,
                                             TBlob* in_grad, OpReqType req, RunContext ctx);
using UnaryGradFunctionT1 = absl::Status (*)(const OutputGrad& out_grad,
                                             const OutputValue& out_value,
                                             const EnvArguments& env, TBlob* in_grad,
                                             OpReqType req, RunContext ctx);
using UnaryGradFunctionT2 = absl::Status (*)(const OutputGrad& out_grad, const Input0& in_data0,
                                             const EnvArguments& env, TBlob* in_grad,
                                             OpReqType req, RunContext ctx);
using BinaryGradFunctionT0 = absl::Status (*)(const OutputGrad& out_grad,
                                              const EnvArguments& env, TBlob* lhs_grad,
                                              TBlob* rhs_grad, OpReqType req_lhs_grad,
                                              OpReqType req_rhs_grad, RunContext ctx);
using BinaryGradFunctionT1 = absl::Status (*)(const OutputGrad& out_grad,
                                              const OutputValue& out_value,
                                              const EnvArguments& env, TBlob* lhs_grad,
                                              TBlob* rhs_grad, OpReqType req_lhs_grad,
                                              OpReqType req_rhs_grad, RunContext ctx);
using BinaryGradFunctionT2 = absl::Status (*)(const OutputGrad& out_grad, const Input0& lhs,
                                              const Input1& rhs, const EnvArguments& env,
                                              TBlob* lhs_grad, TBlob* rhs_grad,
                                              OpReqType req_lhs_grad, OpReqType req_rhs_grad,
                                              RunContext ctx);

enum SimpleOpInplaceOption {
  kNoInplace,      // no sharing
  kInplaceInOut,   // unary: input and output may share memory
  kInplaceOutIn,   // unary: out_grad and in_grad may share memory
  kInplaceLhsOut,  // binary: lhs and output may share memory
  kInplaceOutLhs,  // binary: out_grad and lhs_grad may share memory
};

enum class SimpleOpGradKind { kNone, kT0OutGrad, kT1OutValue, kT2Inputs };

// One SimpleOp's registration. Setters return *this for chaining; misuse (a unary setter
// on a binary op, scalar together with kwargs) is a programmer bug and aborts at startup.
class SimpleOpRegEntry {
 public:
  explicit SimpleOpRegEntry(std::string name) : name_(std::move(name)) {}

  SimpleOpRegEntry& set_shape_function(UnaryShapeFunction fn);
  SimpleOpRegEntry& set_shape_function(BinaryShapeFunction fn);
  SimpleOpRegEntry& set_function(DeviceType dev, UnaryFunction fn, SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_function(DeviceType dev, BinaryFunction fn,
                                 SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_gradient(DeviceType dev, UnaryGradFunctionT0 fn,
                                 SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_gradient(DeviceType dev, UnaryGradFunctionT1 fn,
                                 SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_gradient(DeviceType dev, UnaryGradFunctionT2 fn,
                                 SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_gradient(DeviceType dev, BinaryGradFunctionT0 fn,
                                 SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_gradient(DeviceType dev, BinaryGradFunctionT1 fn,
                                 SimpleOpInplaceOption inplace);
  SimpleOpRegEntry& set_gradient(DeviceType dev, BinaryGradFunctionT2 fn,
                                 SimpleOpInplaceOption inplace);
  // The op takes a `scalar` parameter (env.scalar).
  SimpleOpRegEntry& set_enable_scalar(bool enable);
  // The op takes arbitrary keyword arguments (env.kwargs), parsed by its functions.
  SimpleOpRegEntry& set_enable_kwargs(bool enable);
  SimpleOpRegEntry& set_resource_request(ResourceRequest request);
  SimpleOpRegEntry& set_resource_request(std::vector<ResourceRequest> requests);
  SimpleOpRegEntry& describe(std::string description);
  // Another name of the operator (see OpInfo::AddAlias).
  SimpleOpRegEntry& add_alias(const std::string& alias);

  const std::string& name() const { return name_; }
  // 0 until a function or shape function says: 1 for unary, 2 for binary.
  int num_inputs() const { return num_inputs_; }
  bool enable_scalar() const { return enable_scalar_; }
  bool enable_kwargs() const { return enable_kwargs_; }
  SimpleOpGradKind grad_kind() const { return grad_kind_; }
  const std::vector<ResourceRequest>& resource_requests() const { return resources_; }
  SimpleOpInplaceOption forward_inplace() const { return forward_inplace_; }
  SimpleOpInplaceOption backward_inplace() const { return backward_inplace_; }
  UnaryShapeFunction unary_shape() const { return unary_shape_; }
  BinaryShapeFunction binary_shape() const { return binary_shape_; }
  // The schema of ScalarParam, naming this operator in its errors; only with enable_scalar.
  const ParamSchema<ScalarParam>& scalar_schema() const { return *scalar_schema_; }

  // The functions of device `dev` (null when not registered for it).
  struct DeviceFunctions {
    UnaryFunction unary = nullptr;
    BinaryFunction binary = nullptr;
    UnaryGradFunctionT0 unary_t0 = nullptr;
    UnaryGradFunctionT1 unary_t1 = nullptr;
    UnaryGradFunctionT2 unary_t2 = nullptr;
    BinaryGradFunctionT0 binary_t0 = nullptr;
    BinaryGradFunctionT1 binary_t1 = nullptr;
    BinaryGradFunctionT2 binary_t2 = nullptr;
  };
  const DeviceFunctions& functions(DeviceType dev) const;

 private:
  void SetArity(int n);
  void SetGradKind(SimpleOpGradKind kind, SimpleOpInplaceOption inplace);
  DeviceFunctions& mutable_functions(DeviceType dev);

  friend SimpleOpRegEntry& GetOrCreateSimpleOp(const std::string& name);

  std::string name_;
  OpInfo* op_info_ = nullptr;  // its OpRegistry entry (lives forever)
  int num_inputs_ = 0;
  bool enable_scalar_ = false;
  bool enable_kwargs_ = false;
  SimpleOpGradKind grad_kind_ = SimpleOpGradKind::kNone;
  SimpleOpInplaceOption forward_inplace_ = kNoInplace;
  SimpleOpInplaceOption backward_inplace_ = kNoInplace;
  UnaryShapeFunction unary_shape_ = nullptr;
  BinaryShapeFunction binary_shape_ = nullptr;
  std::vector<ResourceRequest> resources_;
  std::array<DeviceFunctions, 2> by_device_;  // [0] CPU (and pinned), [1] GPU
  std::unique_ptr<ParamSchema<ScalarParam>> scalar_schema_;  // set with enable_scalar
};

// Returns the entry named `name`, creating it (and registering its OperatorProperty in the
// OpRegistry) on first use.
SimpleOpRegEntry& GetOrCreateSimpleOp(const std::string& name);

}  // namespace tessera::ops

// TESSERA_REGISTER_SIMPLE_OP(name, dev): `dev` only keeps the variable names of a .cc and
// a .cu registration of the same op apart.
#define TESSERA_REGISTER_SIMPLE_OP(Name, DEV)                                                 \
  [[maybe_unused]] static ::tessera::ops::SimpleOpRegEntry& TESSERA_OPS_CONCAT_(             \
      TESSERA_OPS_CONCAT_(tessera_simple_op_, Name), TESSERA_OPS_CONCAT_(_, DEV)) =           \
      ::tessera::ops::GetOrCreateSimpleOp(#Name)

#endif  // TESSERA_OPS_SIMPLE_OP_H_

#include "ops/simple_op.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

[[noreturn]] void RegistrationBug(const std::string& op, const char* what) {
  std::fprintf(stderr, "SimpleOp '%s': %s\n", op.c_str(), what);
  std::abort();
}

// The OperatorProperty every SimpleOp presents to the rest of the system.
class SimpleOpProperty : public OperatorProperty {
 public:
  explicit SimpleOpProperty(const SimpleOpRegEntry* entry) : entry_(entry) {}

  absl::Status Init(const KwArgs& kwargs) override {
    env_ = EnvArguments{};
    if (entry_->enable_scalar()) {
      RETURN_IF_ERROR(entry_->scalar_schema().Init(&scalar_param_, kwargs));
      env_.scalar = scalar_param_.scalar;
    } else if (entry_->enable_kwargs()) {
      env_.kwargs = kwargs;
    } else if (!kwargs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(entry_->name(), ": unknown parameter '",
                                                     kwargs.front().first, "' (parameters: none)"));
    }
    return absl::OkStatus();
  }

  std::map<std::string, std::string> GetParams() const override {
    if (entry_->enable_scalar()) return entry_->scalar_schema().Get(scalar_param_);
    return std::map<std::string, std::string>(env_.kwargs.begin(), env_.kwargs.end());
  }

  std::vector<std::string> ListArguments() const override {
    if (entry_->num_inputs() == 2) return {"lhs", "rhs"};
    return {"data"};
  }

  absl::StatusOr<bool> InferShape(std::vector<Shape>* in_shape, std::vector<Shape>* out_shape,
                                  std::vector<Shape>* aux_shape) const override {
    if (entry_->num_inputs() == 2) {
      Shape& lhs = (*in_shape)[0];
      Shape& rhs = (*in_shape)[1];
      if (entry_->binary_shape() != nullptr) {
        if (!lhs.is_known() || !rhs.is_known()) return false;
        ASSIGN_OR_RETURN(Shape out, entry_->binary_shape()(lhs, rhs, env_));
        RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, out, out_shape));
        return true;
      }
      // Default: both operands and the output share one shape; any known one gives it.
      if (lhs.ndim() > 0 && rhs.ndim() > 0 && lhs != rhs && lhs.is_known() && rhs.is_known()) {
        return absl::InvalidArgumentError(absl::StrCat(entry_->name(), ": operands must have ",
                                                       "the same shape, got lhs ",
                                                       lhs.ToString(), " and rhs ",
                                                       rhs.ToString()));
      }
      for (const Shape* known : {&lhs, &rhs, &(*out_shape)[0]}) {
        if (!known->is_known()) continue;
        const Shape s = *known;
        RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, s, in_shape));
        RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 1, s, in_shape));
        RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, s, out_shape));
        return true;
      }
      return false;
    }
    const Shape& src = (*in_shape)[0];
    if (entry_->unary_shape() != nullptr) {
      if (!src.is_known()) return false;
      ASSIGN_OR_RETURN(Shape out, entry_->unary_shape()(src, env_));
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, out, out_shape));
      return true;
    }
    if (src.is_known()) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kOutput, 0, src, out_shape));
      return true;
    }
    if ((*out_shape)[0].is_known()) {
      RETURN_IF_ERROR(AssignShape(*this, Slot::kArgument, 0, (*out_shape)[0], in_shape));
      return true;
    }
    return false;
  }

  std::vector<ResourceRequest> ForwardResource(const std::vector<Shape>&) const override {
    return entry_->resource_requests();
  }
  std::vector<ResourceRequest> BackwardResource(const std::vector<Shape>&) const override {
    return entry_->resource_requests();
  }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad,
                                             const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    switch (entry_->grad_kind()) {
      case SimpleOpGradKind::kT0OutGrad:
        return {out_grad[0]};
      case SimpleOpGradKind::kT1OutValue:
        return {out_grad[0], out_data[0]};
      case SimpleOpGradKind::kT2Inputs: {
        std::vector<int> deps{out_grad[0]};
        deps.insert(deps.end(), in_data.begin(), in_data.end());
        return deps;
      }
      case SimpleOpGradKind::kNone:
        break;
    }
    return {};
  }

  std::vector<std::pair<int, int>> ForwardInplaceOption(
      const std::vector<int>& in_data, const std::vector<int>& out_data) const override {
    const SimpleOpInplaceOption opt = entry_->forward_inplace();
    if (opt == kInplaceInOut || opt == kInplaceLhsOut) return {{in_data[0], out_data[0]}};
    return {};
  }

  std::vector<std::pair<int, int>> BackwardInplaceOption(
      const std::vector<int>& out_grad, const std::vector<int>& in_data,
      const std::vector<int>& out_data, const std::vector<int>& in_grad) const override {
    const SimpleOpInplaceOption opt = entry_->backward_inplace();
    if (opt == kInplaceOutIn || opt == kInplaceOutLhs) return {{out_grad[0], in_grad[0]}};
    return {};
  }

  absl::StatusOr<std::unique_ptr<Operator>> CreateOperator(Context ctx) const override;
  bool HasKernel(DeviceType device) const override {
    const SimpleOpRegEntry::DeviceFunctions& fns = entry_->functions(device);
    return fns.unary != nullptr || fns.binary != nullptr;
  }

  std::unique_ptr<OperatorProperty> Copy() const override {
    return std::make_unique<SimpleOpProperty>(*this);
  }
  std::string TypeString() const override { return entry_->name(); }

 private:
  const SimpleOpRegEntry* entry_;  // not owned; registry entries live forever
  ScalarParam scalar_param_;       // with enable_scalar
  EnvArguments env_;
};

class SimpleOperator : public Operator {
 public:
  SimpleOperator(const SimpleOpRegEntry* entry, const SimpleOpRegEntry::DeviceFunctions* fns,
                 EnvArguments env)
      : entry_(entry), fns_(fns), env_(std::move(env)) {}

  absl::Status Forward(const OpContext& ctx, const std::vector<TBlob>& in_data,
                       const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                       const std::vector<TBlob>& aux_states) override {
    if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
    EnvArguments env = WithResources(ctx);
    TBlob out = out_data[0];
    if (fns_->binary != nullptr) return fns_->binary(in_data[0], in_data[1], env, &out, req[0], ctx.run_ctx);
    return fns_->unary(in_data[0], env, &out, req[0], ctx.run_ctx);
  }

  absl::Status Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad,
                        const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                        const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                        const std::vector<TBlob>& aux_states) override {
    EnvArguments env = WithResources(ctx);
    const OutputGrad og{out_grad[0]};
    TBlob g0 = in_grad[0];
    if (entry_->num_inputs() == 2) {
      TBlob g1 = in_grad[1];
      if (fns_->binary_t0 != nullptr) return fns_->binary_t0(og, env, &g0, &g1, req[0], req[1], ctx.run_ctx);
      if (fns_->binary_t1 != nullptr) {
        return fns_->binary_t1(og, OutputValue{out_data[0]}, env, &g0, &g1, req[0], req[1],
                               ctx.run_ctx);
      }
      if (fns_->binary_t2 != nullptr) {
        return fns_->binary_t2(og, Input0{in_data[0]}, Input1{in_data[1]}, env, &g0, &g1, req[0],
                               req[1], ctx.run_ctx);
      }
    } else {
      if (req[0] == OpReqType::kNullOp) return absl::OkStatus();
      if (fns_->unary_t0 != nullptr) return fns_->unary_t0(og, env, &g0, req[0], ctx.run_ctx);
      if (fns_->unary_t1 != nullptr) {
        return fns_->unary_t1(og, OutputValue{out_data[0]}, env, &g0, req[0], ctx.run_ctx);
      }
      if (fns_->unary_t2 != nullptr) {
        return fns_->unary_t2(og, Input0{in_data[0]}, env, &g0, req[0], ctx.run_ctx);
      }
    }
    return absl::UnimplementedError(
        absl::StrCat(entry_->name(), ": no gradient registered for ", ctx.run_ctx.ctx.ToString()));
  }

 private:
  EnvArguments WithResources(const OpContext& ctx) const {
    EnvArguments env = env_;
    env.resource = ctx.requested;
    return env;
  }

  const SimpleOpRegEntry* entry_;                   // not owned
  const SimpleOpRegEntry::DeviceFunctions* fns_;    // not owned
  EnvArguments env_;
};

absl::StatusOr<std::unique_ptr<Operator>> SimpleOpProperty::CreateOperator(Context ctx) const {
  const SimpleOpRegEntry::DeviceFunctions& fns = entry_->functions(ctx.type);
  if (fns.unary == nullptr && fns.binary == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(entry_->name(), ": no kernel registered for ", ctx.ToString()));
  }
  return std::make_unique<SimpleOperator>(entry_, &fns, env_);
}

}  // namespace

void SimpleOpRegEntry::SetArity(int n) {
  if (num_inputs_ != 0 && num_inputs_ != n) RegistrationBug(name_, "mixes unary and binary");
  num_inputs_ = n;
}

void SimpleOpRegEntry::SetGradKind(SimpleOpGradKind kind, SimpleOpInplaceOption inplace) {
  if (grad_kind_ != SimpleOpGradKind::kNone && grad_kind_ != kind) {
    RegistrationBug(name_, "registers gradients of different kinds for different devices");
  }
  grad_kind_ = kind;
  backward_inplace_ = inplace;
}

SimpleOpRegEntry::DeviceFunctions& SimpleOpRegEntry::mutable_functions(DeviceType dev) {
  return by_device_[dev == DeviceType::kGPU ? 1 : 0];
}

const SimpleOpRegEntry::DeviceFunctions& SimpleOpRegEntry::functions(DeviceType dev) const {
  return by_device_[dev == DeviceType::kGPU ? 1 : 0];
}

SimpleOpRegEntry& SimpleOpRegEntry::set_shape_function(UnaryShapeFunction fn) {
  SetArity(1);
  unary_shape_ = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_shape_function(BinaryShapeFunction fn) {
  SetArity(2);
  binary_shape_ = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_function(DeviceType dev, UnaryFunction fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(1);
  mutable_functions(dev).unary = fn;
  forward_inplace_ = inplace;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_function(DeviceType dev, BinaryFunction fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(2);
  mutable_functions(dev).binary = fn;
  forward_inplace_ = inplace;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_gradient(DeviceType dev, UnaryGradFunctionT0 fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(1);
  SetGradKind(SimpleOpGradKind::kT0OutGrad, inplace);
  mutable_functions(dev).unary_t0 = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_gradient(DeviceType dev, UnaryGradFunctionT1 fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(1);
  SetGradKind(SimpleOpGradKind::kT1OutValue, inplace);
  mutable_functions(dev).unary_t1 = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_gradient(DeviceType dev, UnaryGradFunctionT2 fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(1);
  SetGradKind(SimpleOpGradKind::kT2Inputs, inplace);
  mutable_functions(dev).unary_t2 = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_gradient(DeviceType dev, BinaryGradFunctionT0 fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(2);
  SetGradKind(SimpleOpGradKind::kT0OutGrad, inplace);
  mutable_functions(dev).binary_t0 = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_gradient(DeviceType dev, BinaryGradFunctionT1 fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(2);
  SetGradKind(SimpleOpGradKind::kT1OutValue, inplace);
  mutable_functions(dev).binary_t1 = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_gradient(DeviceType dev, BinaryGradFunctionT2 fn,
                                                 SimpleOpInplaceOption inplace) {
  SetArity(2);
  SetGradKind(SimpleOpGradKind::kT2Inputs, inplace);
  mutable_functions(dev).binary_t2 = fn;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_enable_scalar(bool enable) {
  if (enable && enable_kwargs_) RegistrationBug(name_, "enables both scalar and kwargs");
  if (enable && !enable_scalar_) {
    scalar_schema_ = std::make_unique<ParamSchema<ScalarParam>>(name_);
    scalar_schema_->Field("scalar", &ScalarParam::scalar).Required().Describe("the scalar operand");
    scalar_schema_->Field("is_int", &ScalarParam::is_int)
        .Describe("MXNet's output type for integer data; ignored (floating types only)");
    const std::vector<ParamFieldInfo> info = scalar_schema_->Info();
    op_info_->params.insert(op_info_->params.end(), info.begin(), info.end());
  }
  enable_scalar_ = enable;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_enable_kwargs(bool enable) {
  if (enable && enable_scalar_) RegistrationBug(name_, "enables both scalar and kwargs");
  if (enable && !enable_kwargs_) {
    op_info_->params.push_back(ParamFieldInfo{.name = "**kwargs", .type = "string", .required = false,
                                              .description = "keyword arguments read by the op"});
  }
  enable_kwargs_ = enable;
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_resource_request(ResourceRequest request) {
  resources_ = {request};
  return *this;
}
SimpleOpRegEntry& SimpleOpRegEntry::set_resource_request(std::vector<ResourceRequest> requests) {
  resources_ = std::move(requests);
  return *this;
}

SimpleOpRegEntry& SimpleOpRegEntry::describe(std::string description) {
  op_info_->Describe(std::move(description));
  return *this;
}

SimpleOpRegEntry& SimpleOpRegEntry::add_alias(const std::string& alias) {
  op_info_->AddAlias(alias);
  return *this;
}

SimpleOpRegEntry& GetOrCreateSimpleOp(const std::string& name) {
  // Static-initialization time only, in one thread; a map of stable pointers.
  static auto* entries = new absl::flat_hash_map<std::string, std::unique_ptr<SimpleOpRegEntry>>();
  auto [it, inserted] = entries->try_emplace(name, nullptr);
  if (inserted) {
    it->second = std::make_unique<SimpleOpRegEntry>(name);
    const SimpleOpRegEntry* entry = it->second.get();
    it->second->op_info_ = &OpRegistry::Global().Register(
        name, [entry] { return std::make_unique<SimpleOpProperty>(entry); });
  }
  return *it->second;
}

}  // namespace tessera::ops

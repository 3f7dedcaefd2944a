#include "ops/imperative.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/operator.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

// Everything a push needs, checked and allocated before anything runs.
struct PreparedCall {
  const OpInfo* info = nullptr;
  std::unique_ptr<OperatorProperty> prop;
  std::vector<Shape> out_shapes;
  std::vector<DType> out_types;
  int num_args = 0;
};

absl::StatusOr<PreparedCall> Prepare(absl::string_view op, const KwArgs& kwargs,
                                     const std::vector<NDArray>& inputs) {
  PreparedCall call;
  call.info = OpRegistry::Global().Find(op);
  if (call.info == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown operator '", op, "' (`tessera ops` lists them)"));
  }
  ASSIGN_OR_RETURN(call.prop, OpRegistry::Global().Create(op, kwargs));
  const std::vector<std::string> args = call.prop->ListArguments();
  const std::vector<std::string> aux = call.prop->ListAuxiliaryStates();
  call.num_args = static_cast<int>(args.size());
  if (inputs.size() != args.size() + aux.size()) {
    std::vector<std::string> names(args);
    names.insert(names.end(), aux.begin(), aux.end());
    return absl::InvalidArgumentError(absl::StrCat(op, ": expected ", names.size(), " inputs (",
                                                   absl::StrJoin(names, ", "), "), got ",
                                                   inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = i < args.size() ? args[i] : aux[i - args.size()];
    if (inputs[i].is_none()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": input '", name, "' is a none array"));
    }
    if (inputs[i].ctx() != inputs[0].ctx()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": input '", name, "' is on ",
                                                     inputs[i].ctx().ToString(), " but '",
                                                     args[0], "' is on ",
                                                     inputs[0].ctx().ToString()));
    }
  }
  std::vector<Shape> in_shapes(args.size()), aux_shapes(aux.size());
  std::vector<DType> in_types(args.size()), aux_types(aux.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    (i < args.size() ? in_shapes[i] : aux_shapes[i - args.size()]) = inputs[i].shape();
    (i < args.size() ? in_types[i] : aux_types[i - args.size()]) = inputs[i].dtype();
  }
  call.out_shapes.resize(call.prop->NumOutputs());
  call.out_types.assign(call.prop->NumOutputs(), DType::kUnknown);
  const std::vector<Shape> given_in = in_shapes, given_aux = aux_shapes;
  ASSIGN_OR_RETURN(bool shapes_known, call.prop->InferShape(&in_shapes, &call.out_shapes, &aux_shapes));
  if (!shapes_known) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": cannot infer the output shapes"));
  }
  // Inference may not change what the caller gave (a property that "fixes" a shape would
  // make the kernel read past the array).
  for (size_t i = 0; i < args.size(); ++i) {
    if (in_shapes[i] != given_in[i]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": argument '", args[i], "' has shape ",
                                                     given_in[i].ToString(), ", expected ",
                                                     in_shapes[i].ToString()));
    }
  }
  for (size_t i = 0; i < aux.size(); ++i) {
    if (aux_shapes[i] != given_aux[i]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": auxiliary state '", aux[i],
                                                     "' has shape ", given_aux[i].ToString(),
                                                     ", expected ", aux_shapes[i].ToString()));
    }
  }
  ASSIGN_OR_RETURN(bool types_known, call.prop->InferType(&in_types, &call.out_types, &aux_types));
  if (!types_known) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": cannot infer the output types"));
  }
  return call;
}

absl::Status Push(PreparedCall call, const std::vector<NDArray>& inputs,
                  std::vector<NDArray> outputs, OpReqType req, const InvokeOptions& options) {
  const Runtime& rt = inputs[0].runtime();
  const Context ctx = inputs[0].ctx();
  ASSIGN_OR_RETURN(std::unique_ptr<Operator> op_owned, call.prop->CreateOperator(ctx));
  std::shared_ptr<Operator> op(std::move(op_owned));

  std::vector<Shape> in_shapes;
  for (int i = 0; i < call.num_args; ++i) in_shapes.push_back(inputs[i].shape());
  std::vector<Resource> resources;
  std::vector<engine::VarHandle> const_vars, mutate_vars;
  for (const ResourceRequest& r : call.prop->ForwardResource(in_shapes)) {
    ASSIGN_OR_RETURN(Resource res, rt.resources->Request(ctx, r));
    resources.push_back(res);
    mutate_vars.push_back(res.var);
  }
  for (const NDArray& out : outputs) mutate_vars.push_back(out.var());
  for (size_t i = call.num_args; i < inputs.size(); ++i) mutate_vars.push_back(inputs[i].var());
  for (int i = 0; i < call.num_args; ++i) const_vars.push_back(inputs[i].var());

  std::vector<OpReqType> reqs(outputs.size(), OpReqType::kWriteTo);
  for (int i = 0; i < call.prop->NumVisibleOutputs(); ++i) reqs[i] = req;
  const bool is_train = options.is_train;
  auto fn = [op, inputs, outputs, reqs, resources, is_train,
             num_args = call.num_args](engine::RunContext run_ctx) -> absl::Status {
    OpContext op_ctx;
    op_ctx.is_train = is_train;
    op_ctx.run_ctx = run_ctx;
    op_ctx.requested = resources;
    std::vector<TBlob> in, aux, out;
    for (int i = 0; i < num_args; ++i) in.push_back(inputs[i].data());
    for (size_t i = num_args; i < inputs.size(); ++i) aux.push_back(inputs[i].data());
    for (const NDArray& o : outputs) out.push_back(o.data());
    return op->Forward(op_ctx, in, reqs, out, aux);
  };
  // The registry's name lives forever, as the engine's profiler needs.
  return rt.engine->PushSync(std::move(fn), ctx, const_vars, mutate_vars,
                             engine::FnProperty::kNormal, options.priority, call.info->name.c_str());
}

}  // namespace

absl::StatusOr<std::vector<NDArray>> Invoke(absl::string_view op, const KwArgs& kwargs,
                                            const std::vector<NDArray>& inputs,
                                            const InvokeOptions& options) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": needs at least one input array"));
  }
  ASSIGN_OR_RETURN(PreparedCall call, Prepare(op, kwargs, inputs));
  std::vector<NDArray> outputs;
  for (size_t i = 0; i < call.out_shapes.size(); ++i) {
    ASSIGN_OR_RETURN(NDArray out, NDArray::Empty(inputs[0].runtime(), call.out_shapes[i],
                                                 inputs[0].ctx(), call.out_types[i]));
    outputs.push_back(std::move(out));
  }
  const int visible = call.prop->NumVisibleOutputs();
  RETURN_IF_ERROR(Push(std::move(call), inputs, outputs, OpReqType::kWriteTo, options));
  outputs.resize(visible);
  return outputs;
}

absl::Status InvokeInto(absl::string_view op, const KwArgs& kwargs,
                        const std::vector<NDArray>& inputs, const std::vector<NDArray>& outputs,
                        OpReqType req, const InvokeOptions& options) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": needs at least one input array"));
  }
  ASSIGN_OR_RETURN(PreparedCall call, Prepare(op, kwargs, inputs));
  const int visible = call.prop->NumVisibleOutputs();
  if (static_cast<int>(outputs.size()) != visible) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": expected ", visible, " output arrays, got ", outputs.size()));
  }
  const std::vector<std::string> names = call.prop->ListOutputs();
  std::vector<NDArray> all(outputs);
  for (int i = 0; i < visible; ++i) {
    const NDArray& out = outputs[i];
    if (out.is_none() || out.shape() != call.out_shapes[i] || out.dtype() != call.out_types[i] ||
        out.ctx() != inputs[0].ctx()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": output '", names[i], "' must be ", call.out_shapes[i].ToString(), " ",
          DTypeName(call.out_types[i]), " on ", inputs[0].ctx().ToString(), ", got ",
          out.is_none() ? "a none array"
                        : absl::StrCat(out.shape().ToString(), " ", DTypeName(out.dtype()), " on ",
                                       out.ctx().ToString())));
    }
    for (const NDArray& in : inputs) {
      if (in.var() == out.var()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": output '", names[i], "' shares storage with an input; use a fresh array"));
      }
    }
  }
  for (size_t i = visible; i < call.out_shapes.size(); ++i) {
    ASSIGN_OR_RETURN(NDArray hidden, NDArray::Empty(inputs[0].runtime(), call.out_shapes[i],
                                                    inputs[0].ctx(), call.out_types[i]));
    all.push_back(std::move(hidden));
  }
  return Push(std::move(call), inputs, std::move(all), req, options);
}

}  // namespace tessera::ops

#include "ops/operator.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tessera::ops {

absl::Status Operator::Backward(const OpContext&, const std::vector<TBlob>&,
                                const std::vector<TBlob>&, const std::vector<TBlob>&,
                                const std::vector<OpReqType>&, const std::vector<TBlob>&,
                                const std::vector<TBlob>&) {
  return absl::UnimplementedError("this operator has no backward");
}

absl::StatusOr<bool> OperatorProperty::InferType(std::vector<DType>* in_type,
                                                 std::vector<DType>* out_type,
                                                 std::vector<DType>* aux_type) const {
  DType known = DType::kUnknown;
  std::string known_from;
  const std::vector<std::string> args = ListArguments();
  const std::vector<std::string> outs = ListOutputs();
  const std::vector<std::string> auxs = ListAuxiliaryStates();
  auto visit = [&](std::vector<DType>* types, const std::vector<std::string>& names,
                   const char* kind) -> absl::Status {
    for (size_t i = 0; i < types->size(); ++i) {
      const DType t = (*types)[i];
      if (t == DType::kUnknown) continue;
      const std::string name = i < names.size() ? names[i] : absl::StrCat(i);
      if (known == DType::kUnknown) {
        known = t;
        known_from = absl::StrCat(kind, " '", name, "'");
      } else if (t != known) {
        return absl::InvalidArgumentError(
            absl::StrCat(TypeString(), ": dtype mismatch: ", known_from, " is ", DTypeName(known),
                         " but ", kind, " '", name, "' is ", DTypeName(t)));
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status s = visit(in_type, args, "argument"); !s.ok()) return s;
  if (absl::Status s = visit(out_type, outs, "output"); !s.ok()) return s;
  if (absl::Status s = visit(aux_type, auxs, "auxiliary state"); !s.ok()) return s;
  if (known == DType::kUnknown) return false;
  for (auto* types : {in_type, out_type, aux_type}) {
    for (DType& t : *types) t = known;
  }
  return true;
}

std::vector<int> OperatorProperty::DeclareBackwardDependency(
    const std::vector<int>& out_grad, const std::vector<int>& in_data,
    const std::vector<int>& out_data) const {
  std::vector<int> deps(out_grad);
  deps.insert(deps.end(), in_data.begin(), in_data.end());
  deps.insert(deps.end(), out_data.begin(), out_data.end());
  return deps;
}

const ParamSchema<NoParam>& NoParam::Schema() {
  static const auto* schema = new ParamSchema<NoParam>("operator");
  return *schema;
}

namespace {
absl::flat_hash_map<std::string, GpuOperatorFactory>& GpuFactories() {
  static auto* factories = new absl::flat_hash_map<std::string, GpuOperatorFactory>();
  return *factories;
}
}  // namespace

void RegisterGpuOperator(const std::string& op, GpuOperatorFactory factory) {
  GpuFactories()[op] = std::move(factory);
}

bool HasGpuOperator(const std::string& op) { return GpuFactories().contains(op); }

bool OperatorProperty::HasKernel(DeviceType device) const {
  return device != DeviceType::kGPU || HasGpuOperator(TypeString());
}

absl::StatusOr<std::unique_ptr<Operator>> CreateGpuOperator(const OperatorProperty& prop,
                                                            Context ctx) {
  auto it = GpuFactories().find(prop.TypeString());
  if (it == GpuFactories().end()) {
    return absl::UnimplementedError(absl::StrCat(prop.TypeString(), ": no GPU kernel in this build (",
                                                 ctx.ToString(), ")"));
  }
  return it->second(prop, ctx);
}

absl::Status AssignShape(const OperatorProperty& prop, Slot slot, int index,
                         const Shape& expected, std::vector<Shape>* shapes) {
  std::vector<std::string> names;
  const char* kind = "argument";
  switch (slot) {
    case Slot::kArgument:
      names = prop.ListArguments();
      break;
    case Slot::kOutput:
      names = prop.ListOutputs();
      kind = "output";
      break;
    case Slot::kAux:
      names = prop.ListAuxiliaryStates();
      kind = "auxiliary state";
      break;
  }
  const std::string name =
      index < static_cast<int>(names.size()) ? names[index] : absl::StrCat("#", index);
  absl::Status status =
      MergeShape(expected, &(*shapes)[index], absl::StrCat(kind, " '", name, "'"));
  if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat(prop.TypeString(), ": ", status.message()));
  return absl::OkStatus();
}

}  // namespace tessera::ops

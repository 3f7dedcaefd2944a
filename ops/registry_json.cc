#include "ops/registry_json.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "ops/registry.h"

namespace tessera::ops {

absl::StatusOr<std::string> DescribeOperatorsJson(absl::string_view only) {
  std::vector<const OpInfo*> ops = OpRegistry::Global().List();
  if (!only.empty()) {
    const OpInfo* info = OpRegistry::Global().Find(only);
    if (info == nullptr) return absl::NotFoundError(absl::StrCat("unknown operator '", only, "'"));
    ops = {info};
  }
  nlohmann::json out = nlohmann::json::array();
  for (const OpInfo* info : ops) {
    std::unique_ptr<OperatorProperty> prop = info->factory();
    nlohmann::json params = nlohmann::json::array();
    nlohmann::json variadic = nullptr;
    for (const ParamFieldInfo& p : info->params) {
      params.push_back(
          {{"name", p.name},
           {"type", p.type},
           {"default", p.required ? nlohmann::json() : nlohmann::json(p.default_value)},
           {"required", p.required},
           {"description", p.description}});
      if (p.name == "num_args") variadic = p.name;
    }
    out.push_back({{"name", info->name},
                   {"description", info->description},
                   {"arguments", prop->ListArguments()},
                   {"outputs", prop->ListOutputs()},
                   {"aux_states", prop->ListAuxiliaryStates()},
                   {"gpu", prop->HasKernel(DeviceType::kGPU)},
                   {"variadic", variadic},
                   {"params", std::move(params)}});
  }
  return out.dump(1);
}

}  // namespace tessera::ops

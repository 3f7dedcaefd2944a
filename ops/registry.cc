#include "ops/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::ops {

OpRegistry& OpRegistry::Global() {
  static auto* registry = new OpRegistry();  // never destroyed: used during static exit too
  return *registry;
}

OpInfo& OpInfo::AddAlias(const std::string& alias) {
  OpRegistry::Global().AddAlias(alias, this);
  aliases.push_back(alias);
  return *this;
}

namespace {

[[noreturn]] void NameTakenTwice(const std::string& name) {
  std::fprintf(stderr, "operator name '%s' registered twice\n", name.c_str());
  std::abort();
}

}  // namespace

OpInfo& OpRegistry::Register(const std::string& name,
                             std::function<std::unique_ptr<OperatorProperty>()> factory) {
  auto [it, inserted] = ops_.try_emplace(name, nullptr);
  if (!inserted || aliases_.contains(name)) NameTakenTwice(name);
  it->second = std::make_unique<OpInfo>();
  it->second->name = name;
  it->second->factory = std::move(factory);
  return *it->second;
}

void OpRegistry::AddAlias(const std::string& alias, const OpInfo* info) {
  if (ops_.contains(alias) || !aliases_.try_emplace(alias, info).second) NameTakenTwice(alias);
}

const OpInfo* OpRegistry::Find(absl::string_view name) const {
  if (auto it = ops_.find(name); it != ops_.end()) return it->second.get();
  auto alias = aliases_.find(name);
  return alias == aliases_.end() ? nullptr : alias->second;
}

std::vector<const OpInfo*> OpRegistry::List() const {
  std::vector<const OpInfo*> out;
  for (const auto& [name, info] : ops_) out.push_back(info.get());
  std::sort(out.begin(), out.end(),
            [](const OpInfo* a, const OpInfo* b) { return a->name < b->name; });
  return out;
}

absl::StatusOr<std::unique_ptr<OperatorProperty>> OpRegistry::Create(absl::string_view name,
                                                                     const KwArgs& kwargs) const {
  const OpInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown operator '", name, "' (`tessera ops` lists them)"));
  }
  std::unique_ptr<OperatorProperty> prop = info->factory();
  if (absl::Status status = prop->Init(kwargs); !status.ok()) return status;
  return prop;
}

namespace {

// The names of a list, or "-" when empty.
std::string Names(const std::vector<std::string>& names) {
  return names.empty() ? "-" : absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<std::string> DescribeOperators(absl::string_view only) {
  std::string out;
  std::vector<const OpInfo*> ops = OpRegistry::Global().List();
  if (!only.empty()) {
    const OpInfo* info = OpRegistry::Global().Find(only);
    if (info == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown operator '", only, "'"));
    }
    ops = {info};
  }
  for (const OpInfo* info : ops) {
    absl::StrAppend(&out, info->name, "\n");
    if (!info->description.empty()) absl::StrAppend(&out, "  ", info->description, "\n");
    if (!info->aliases.empty()) {
      absl::StrAppend(&out, "  also named (MXNet's aliases): ", Names(info->aliases), "\n");
    }
    // Argument lists can depend on parameters (no_bias, num_args); show those of the
    // defaults, which is what a user starts from.
    std::unique_ptr<OperatorProperty> prop = info->factory();
    absl::StrAppend(&out, "  arguments: ", Names(prop->ListArguments()), "\n");
    absl::StrAppend(&out, "  outputs: ", Names(prop->ListOutputs()), "\n");
    const auto aux = prop->ListAuxiliaryStates();
    if (!aux.empty()) absl::StrAppend(&out, "  auxiliary states: ", Names(aux), "\n");
    absl::StrAppend(&out, "  devices: ",
                    prop->HasKernel(DeviceType::kGPU)
                        ? "cpu, gpu"
                        : "cpu only (no GPU kernel in this build: binding it on a GPU is refused)",
                    "\n");
    if (info->params.empty()) {
      absl::StrAppend(&out, "  parameters: -\n");
    } else {
      absl::StrAppend(&out, "  parameters:\n");
      for (const ParamFieldInfo& p : info->params) {
        absl::StrAppend(&out, "    ", p.name, " (", p.type, ", ",
                        p.required ? "required" : absl::StrCat("default ", p.default_value), ")");
        if (!p.description.empty()) absl::StrAppend(&out, ": ", p.description);
        absl::StrAppend(&out, "\n");
      }
    }
  }
  absl::StrAppend(&out, ops.size(), " operators\n");
  return out;
}

}  // namespace tessera::ops

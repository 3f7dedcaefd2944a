// OpRegistry: every operator by name, with its description and parameter docs; how the
// graph layer, the NDArray function interface and `tessera ops` find operators.
//
// An operator may also have aliases, the other names MXNet registers for it (its
// add_alias: "_Plus" for elemwise_add, "Softmax" for SoftmaxOutput, ...), which is how
// older symbol files name it. Find and Create take an alias; everything else - List, an
// operator's TypeString, the symbol files written - uses the operator's own name.
//
// Registration happens at static-initialization time through TESSERA_REGISTER_OP_PROPERTY
// (or TESSERA_REGISTER_SIMPLE_OP), so the libraries holding operators are linked with
// alwayslink = True. The registry is a process-wide table of code, not of state: after
// static initialization it is only read, from any thread.
#ifndef TESSERA_OPS_REGISTRY_H_
#define TESSERA_OPS_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ops/operator.h"
#include "ops/param.h"

namespace tessera::ops {

struct OpInfo {
  std::string name;
  std::string description;
  std::vector<ParamFieldInfo> params;
  std::vector<std::string> aliases;
  std::function<std::unique_ptr<OperatorProperty>()> factory;

  OpInfo& Describe(std::string text) {
    description = std::move(text);
    return *this;
  }
  // Registers `alias` as another name of this operator in the global registry; a name
  // already taken is a programmer bug and aborts.
  OpInfo& AddAlias(const std::string& alias);
  template <typename Param>
  OpInfo& AddParams() {
    const auto info = Param::Schema().Info();
    params.insert(params.end(), info.begin(), info.end());
    return *this;
  }
};

class OpRegistry {
 public:
  static OpRegistry& Global();

  // Adds an entry; a second registration of one name is a programmer bug and aborts.
  OpInfo& Register(const std::string& name,
                   std::function<std::unique_ptr<OperatorProperty>()> factory);
  // Makes `alias` another name of the registered operator `info` (OpInfo::AddAlias).
  void AddAlias(const std::string& alias, const OpInfo* info);

  // By name or alias; null when there is no such operator.
  const OpInfo* Find(absl::string_view name) const;
  // Every operator, sorted by name.
  std::vector<const OpInfo*> List() const;

  // A property of operator `name` initialized from `kwargs`. NOT_FOUND names the operator;
  // Init's errors pass through.
  absl::StatusOr<std::unique_ptr<OperatorProperty>> Create(absl::string_view name,
                                                           const KwArgs& kwargs) const;

 private:
  // Entries never move once registered (Register returns references that macros keep).
  absl::flat_hash_map<std::string, std::unique_ptr<OpInfo>> ops_;
  absl::flat_hash_map<std::string, const OpInfo*> aliases_;  // entries of ops_
};

// Human-readable description of every operator (what `tessera ops` prints): name,
// description, arguments, outputs, auxiliary states and parameters with types and defaults.
// With `only` set, just that operator (NOT_FOUND when there is none).
absl::StatusOr<std::string> DescribeOperators(absl::string_view only = "");

}  // namespace tessera::ops

#define TESSERA_OPS_CONCAT_INNER_(a, b) a##b
#define TESSERA_OPS_CONCAT_(a, b) TESSERA_OPS_CONCAT_INNER_(a, b)

// TESSERA_REGISTER_OP_PROPERTY(Convolution, ConvolutionProp).Describe("...").AddParams<P>();
#define TESSERA_REGISTER_OP_PROPERTY(Name, PropertyClass)                                   \
  [[maybe_unused]] static ::tessera::ops::OpInfo& TESSERA_OPS_CONCAT_(tessera_op_, Name) = \
      ::tessera::ops::OpRegistry::Global().Register(                                        \
          #Name, [] { return std::make_unique<PropertyClass>(); })

#endif  // TESSERA_OPS_REGISTRY_H_

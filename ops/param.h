// Typed operator parameters from string key/value pairs, in the spirit of dmlc::Parameter.
//
// An operator keeps its parameters in a plain struct whose member initializers are the
// defaults, and describes the fields once in a ParamSchema:
//
//   struct PoolingParam {
//     Shape kernel;
//     PoolType pool_type = PoolType::kMax;
//     static const ParamSchema<PoolingParam>& Schema() {
//       static const auto* schema = [] {
//         auto* s = new ParamSchema<PoolingParam>("Pooling");
//         s->Field("kernel", &PoolingParam::kernel).Required().Describe("window (h, w)");
//         s->Field("pool_type", &PoolingParam::pool_type)
//             .Enum({{"max", PoolType::kMax}, {"avg", PoolType::kAvg}});
//         return s;
//       }();
//       return *schema;
//     }
//   };
//
// Schema().Init(&param, kwargs) resets the struct to its defaults, then parses every pair;
// an unknown key, a missing required field, a value that does not parse, or one outside
// its range or enum is INVALID_ARGUMENT naming the operator, the field and the value.
// "None" is how MXNet writes an optional parameter left unset: such a field keeps its
// default (a required one is then missing), unless "None" is one of its own values (an enum
// name, any string, or the empty std::optional).
// Supported field types: bool, int, int64_t, float, double, std::string, Shape,
// std::vector<int> (e.g. axes, "(0,-1)"), DType, enums (with Enum()), and std::optional of
// the plain ones (MXNet's dmlc::optional, "None" when empty).
//
// MXNet compatibility: every parameter MXNet declares for an operator is a field, so any
// symbol file MXNet writes parses. A value that would change the result and that Tessera
// does not implement is refused by name with SupportedOnly(): "Convolution: layout 'NHWC'
// is not supported (only 'None', 'NCHW')". Fields that only steer MXNet's backends
// (cudnn_tune, workspace, ...) are accepted, and their descriptions say what Tessera does.
// A schema is immutable after construction and safe to use from any thread.
#ifndef TESSERA_OPS_PARAM_H_
#define TESSERA_OPS_PARAM_H_

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera::ops {

using KwArgs = std::vector<std::pair<std::string, std::string>>;

// What `tessera ops` prints about one field.
struct ParamFieldInfo {
  std::string name;
  std::string type;           // "int", "float", "Shape", "{'max', 'avg'}", ...
  std::string default_value;  // empty for a required field
  bool required = false;
  std::string description;
};

namespace param_internal {

// Parse/format of the plain field types; each returns an error message, "" on success.
std::string Parse(absl::string_view text, bool* out);
std::string Parse(absl::string_view text, int* out);
std::string Parse(absl::string_view text, int64_t* out);
std::string Parse(absl::string_view text, float* out);
std::string Parse(absl::string_view text, double* out);
std::string Parse(absl::string_view text, std::string* out);
std::string Parse(absl::string_view text, Shape* out);
std::string Parse(absl::string_view text, std::vector<int>* out);
std::string Parse(absl::string_view text, DType* out);
std::string Format(bool v);
std::string Format(int v);
std::string Format(int64_t v);
std::string Format(float v);
std::string Format(double v);
std::string Format(const std::string& v);
std::string Format(const Shape& v);
std::string Format(const std::vector<int>& v);
std::string Format(DType v);
// MXNet's dmlc::optional: "None" is the empty value.
template <typename T>
std::string Parse(absl::string_view text, std::optional<T>* out) {
  if (absl::StripAsciiWhitespace(text) == "None") {
    out->reset();
    return "";
  }
  T value{};
  std::string error = Parse(text, &value);
  if (error.empty()) *out = std::move(value);
  return error;
}
template <typename T>
std::string Format(const std::optional<T>& v) {
  return v.has_value() ? Format(*v) : "None";
}

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {
  using Value = T;
};

template <typename T>
std::string TypeName() {
  if constexpr (IsOptional<T>::value) {
    return std::string(TypeName<typename IsOptional<T>::Value>()) + " or None";
  }
  if constexpr (std::is_same_v<T, bool>) return "boolean";
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) return "int";
  if constexpr (std::is_floating_point_v<T>) return "float";
  if constexpr (std::is_same_v<T, std::string>) return "string";
  if constexpr (std::is_same_v<T, Shape>) return "Shape";
  if constexpr (std::is_same_v<T, std::vector<int>>) return "tuple of int";
  if constexpr (std::is_same_v<T, DType>) return "dtype";
  return "enum";
}

template <typename P>
class FieldBase {
 public:
  virtual ~FieldBase() = default;
  virtual absl::Status Set(P* p, absl::string_view value, absl::string_view op) const = 0;
  virtual std::string Get(const P& p) const = 0;
  virtual ParamFieldInfo Info(const P& defaults) const = 0;
  const std::string& name() const { return name_; }
  bool required() const { return required_; }
  // Whether "None" is a value of this field rather than MXNet's "unset".
  virtual bool TakesNone() const = 0;

 protected:
  std::string name_;
  std::string description_;
  bool required_ = false;
};

}  // namespace param_internal

// One field's description; returned by ParamSchema::Field for chaining.
template <typename P, typename T>
class ParamField : public param_internal::FieldBase<P> {
 public:
  ParamField(std::string name, T P::*member) : member_(member) { this->name_ = std::move(name); }

  ParamField& Required() {
    this->required_ = true;
    return *this;
  }
  ParamField& Describe(std::string text) {
    this->description_ = std::move(text);
    return *this;
  }
  // Inclusive bounds for numeric fields (each element of a Shape or vector).
  ParamField& Range(double lo, double hi) {
    lo_ = lo;
    hi_ = hi;
    has_range_ = true;
    return *this;
  }
  ParamField& Lower(double lo) { return Range(lo, 1e300); }
  // The accepted names of an enum (or int) field and their values.
  ParamField& Enum(std::vector<std::pair<std::string, T>> values) {
    enum_ = std::move(values);
    return *this;
  }
  // The values Tessera implements, when MXNet takes more: any other value that parses is
  // refused by name ("<op>: <field> '<value>' is not supported (only ...)"), so a model
  // that needs it fails when it is built rather than computing something else.
  ParamField& SupportedOnly(std::vector<T> values) {
    supported_ = std::move(values);
    return *this;
  }

  absl::Status Set(P* p, absl::string_view value, absl::string_view op) const override {
    T parsed{};
    std::string error;
    if (!enum_.empty()) {
      error = absl::StrCat("expected one of {", EnumNames(), "}");
      for (const auto& [name, v] : enum_) {
        if (name == value) {
          parsed = v;
          error.clear();
          break;
        }
      }
    } else if constexpr (kPlainEnum) {
      error = "enum field without values (a bug in the operator)";
    } else {
      error = param_internal::Parse(value, &parsed);
      if (error.empty() && has_range_) error = CheckRange(parsed);
    }
    if (!error.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": invalid value '", value,
                                                     "' for parameter '", this->name_, "': ", error));
    }
    if (!supported_.empty() &&
        std::find(supported_.begin(), supported_.end(), parsed) == supported_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", this->name_, " '", value, "' is not supported (only ", SupportedNames(), ")"));
    }
    p->*member_ = std::move(parsed);
    return absl::OkStatus();
  }

  std::string Get(const P& p) const override { return Format(p.*member_); }

  bool TakesNone() const override {
    if constexpr (std::is_same_v<T, std::string> || param_internal::IsOptional<T>::value) {
      return true;
    }
    for (const auto& entry : enum_) {
      if (entry.first == "None") return true;
    }
    return false;
  }

  ParamFieldInfo Info(const P& defaults) const override {
    ParamFieldInfo info;
    info.name = this->name_;
    info.type = enum_.empty() ? param_internal::TypeName<T>() : absl::StrCat("{", EnumNames(), "}");
    if (has_range_ && enum_.empty()) {
      info.type += hi_ >= 1e300 ? absl::StrCat(", >= ", lo_) : absl::StrCat(" in [", lo_, ", ", hi_, "]");
    }
    info.required = this->required_;
    if (!this->required_) info.default_value = Format(defaults.*member_);
    info.description = this->description_;
    if (!supported_.empty()) {
      absl::StrAppend(&info.description, info.description.empty() ? "" : "; ",
                      "Tessera supports only ", SupportedNames());
    }
    return info;
  }

 private:
  std::string EnumNames() const {
    std::vector<std::string> names;
    for (const auto& entry : enum_) names.push_back(absl::StrCat("'", entry.first, "'"));
    return absl::StrJoin(names, ", ");
  }
  std::string SupportedNames() const {
    std::vector<std::string> names;
    for (const T& v : supported_) names.push_back(absl::StrCat("'", Format(v), "'"));
    return absl::StrJoin(names, ", ");
  }
  std::string Format(const T& v) const {
    for (const auto& [name, value] : enum_) {
      if (value == v) return name;
    }
    if constexpr (kPlainEnum) {
      return absl::StrCat(static_cast<int>(v));
    } else {
      return param_internal::Format(v);
    }
  }
  std::string CheckRange(const T& v) const {
    auto out_of_range = [&](double x) { return x < lo_ || x > hi_; };
    bool bad = false;
    if constexpr (std::is_arithmetic_v<T>) {
      bad = out_of_range(static_cast<double>(v));
    } else if constexpr (param_internal::IsOptional<T>::value) {
      bad = v.has_value() && out_of_range(static_cast<double>(*v));
    } else if constexpr (std::is_same_v<T, Shape> || std::is_same_v<T, std::vector<int>>) {
      for (auto x : v) bad = bad || out_of_range(static_cast<double>(x));
    }
    if (!bad) return "";
    return hi_ >= 1e300 ? absl::StrCat("must be >= ", lo_)
                        : absl::StrCat("must be in [", lo_, ", ", hi_, "]");
  }

  // Enums other than DType (which parses by name) need Enum() values.
  static constexpr bool kPlainEnum = std::is_enum_v<T> && !std::is_same_v<T, DType>;

  T P::*member_;
  std::vector<std::pair<std::string, T>> enum_;
  std::vector<T> supported_;  // empty: every value that parses
  bool has_range_ = false;
  double lo_ = 0, hi_ = 0;
};

template <typename P>
class ParamSchema {
 public:
  // `op` names the operator in error messages.
  explicit ParamSchema(std::string op) : op_(std::move(op)) {}

  template <typename T>
  ParamField<P, T>& Field(std::string name, T P::*member) {
    auto field = std::make_unique<ParamField<P, T>>(std::move(name), member);
    ParamField<P, T>& ref = *field;
    fields_.push_back(std::move(field));
    return ref;
  }

  // Resets `*p` to its defaults and applies `kwargs`.
  absl::Status Init(P* p, const KwArgs& kwargs) const {
    *p = P{};
    std::vector<bool> seen(fields_.size(), false);
    for (const auto& [key, value] : kwargs) {
      size_t i = 0;
      while (i < fields_.size() && fields_[i]->name() != key) ++i;
      if (i == fields_.size()) {
        return absl::InvalidArgumentError(absl::StrCat(op_, ": unknown parameter '", key,
                                                       "' (parameters: ", FieldNames(), ")"));
      }
      if (value == "None" && !fields_[i]->TakesNone()) continue;  // unset: the default
      absl::Status status = fields_[i]->Set(p, value, op_);
      if (!status.ok()) return status;
      seen[i] = true;
    }
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (fields_[i]->required() && !seen[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_, ": required parameter '", fields_[i]->name(), "' is missing"));
      }
    }
    return absl::OkStatus();
  }

  // Every field of `p` as text that Init parses back to the same value.
  std::map<std::string, std::string> Get(const P& p) const {
    std::map<std::string, std::string> out;
    for (const auto& field : fields_) out[field->name()] = field->Get(p);
    return out;
  }

  std::vector<ParamFieldInfo> Info() const {
    const P defaults{};
    std::vector<ParamFieldInfo> out;
    for (const auto& field : fields_) out.push_back(field->Info(defaults));
    return out;
  }

 private:
  std::string FieldNames() const {
    if (fields_.empty()) return "none";
    std::vector<std::string> names;
    for (const auto& field : fields_) names.push_back(field->name());
    return absl::StrJoin(names, ", ");
  }

  std::string op_;
  std::vector<std::unique_ptr<param_internal::FieldBase<P>>> fields_;
};

}  // namespace tessera::ops

#endif  // TESSERA_OPS_PARAM_H_

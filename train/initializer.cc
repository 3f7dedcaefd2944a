#include "train/initializer.h"

#include <cmath>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ndarray/arithmetic.h"
#include "ndarray/random.h"

namespace tessera::train {

absl::Status Initializer::operator()(const std::string& name, const NDArray& array) const {
  if (array.ctx().is_gpu()) {
    // Drawn on the host and copied, as MXNet initializes parameters on the CPU: one seed then
    // gives the same parameters on every device (each device's generator has its own
    // subsequence).
    ASSIGN_OR_RETURN(NDArray host,
                     NDArray::Empty(array.runtime(), array.shape(), Context::CPU(), array.dtype()));
    RETURN_IF_ERROR((*this)(name, host));
    return CopyFromTo(host, array);
  }
  for (const char* zero : {"bias", "beta", "moving_mean", "moving_inv_var"}) {
    if (absl::EndsWith(name, zero)) return Fill(array, 0.0);
  }
  for (const char* one : {"gamma", "moving_var"}) {
    if (absl::EndsWith(name, one)) return Fill(array, 1.0);
  }
  return InitWeight(name, array);
}

absl::Status Uniform::InitWeight(const std::string&, const NDArray& array) const {
  return SampleUniform(-scale_, scale_, array);
}
std::string Uniform::ToString() const { return absl::StrCat("Uniform(scale=", scale_, ")"); }

absl::Status Normal::InitWeight(const std::string&, const NDArray& array) const {
  return SampleNormal(0.0, sigma_, array);
}
std::string Normal::ToString() const { return absl::StrCat("Normal(sigma=", sigma_, ")"); }

absl::Status Constant::InitWeight(const std::string&, const NDArray& array) const {
  return Fill(array, value_);
}
std::string Constant::ToString() const { return absl::StrCat("Constant(value=", value_, ")"); }

absl::Status Xavier::InitWeight(const std::string& name, const NDArray& array) const {
  const Shape& s = array.shape();
  if (s.ndim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("Xavier: parameter '", name, "' has shape ", s.ToString(),
                                                   "; it needs at least 2 dimensions"));
  }
  // MXNet: hw_scale is the product of the dimensions after the first two.
  const double receptive = static_cast<double>(s.ProdRange(2, s.ndim()));
  const double fan_in = s[1] * receptive, fan_out = s[0] * receptive;
  const double factor = factor_ == Factor::kIn ? fan_in : factor_ == Factor::kOut ? fan_out : (fan_in + fan_out) / 2;
  const double scale = std::sqrt(magnitude_ / factor);
  return rnd_ == Distribution::kUniform ? SampleUniform(-scale, scale, array) : SampleNormal(0.0, scale, array);
}
std::string Xavier::ToString() const {
  return absl::StrCat("Xavier(rnd_type=", rnd_ == Distribution::kUniform ? "uniform" : "gaussian",
                      ", factor_type=", factor_ == Factor::kAvg ? "avg" : factor_ == Factor::kIn ? "in" : "out",
                      ", magnitude=", magnitude_, ")");
}

struct Mixed::CompiledRule {
  std::string pattern;
  std::regex regex;
  std::shared_ptr<const Initializer> init;
};

absl::StatusOr<std::unique_ptr<Mixed>> Mixed::Create(std::vector<Rule> rules) {
  std::vector<std::shared_ptr<const CompiledRule>> compiled;
  for (auto& [pattern, init] : rules) {
    if (init == nullptr) return absl::InvalidArgumentError(absl::StrCat("Mixed: pattern '", pattern, "' has no initializer"));
    try {
      compiled.push_back(std::make_shared<CompiledRule>(CompiledRule{pattern, std::regex(pattern), init}));
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("Mixed: pattern '", pattern, "' is not a regular expression: ", e.what()));
    }
  }
  return std::unique_ptr<Mixed>(new Mixed(std::move(compiled)));
}

absl::Status Mixed::InitWeight(const std::string& name, const NDArray& array) const {
  for (const auto& rule : rules_) {
    if (std::regex_match(name, rule->regex)) return (*rule->init)(name, array);
  }
  std::vector<std::string> patterns;
  for (const auto& rule : rules_) patterns.push_back(rule->pattern);
  return absl::InvalidArgumentError(absl::StrCat("Mixed: no pattern matches parameter '", name, "' (patterns: ",
                                                 absl::StrJoin(patterns, ", "), ")"));
}

std::string Mixed::ToString() const {
  std::vector<std::string> parts;
  for (const auto& rule : rules_) parts.push_back(absl::StrCat("'", rule->pattern, "': ", rule->init->ToString()));
  return absl::StrCat("Mixed(", absl::StrJoin(parts, ", "), ")");
}

std::vector<std::string> InitializerNames() { return {"xavier", "uniform", "normal"}; }

absl::StatusOr<std::shared_ptr<const Initializer>> CreateInitializer(const std::string& name) {
  if (name.empty() || name == "xavier") return std::make_shared<Xavier>();
  if (name == "uniform") return std::make_shared<Uniform>();
  if (name == "normal") return std::make_shared<Normal>();
  return absl::InvalidArgumentError(absl::StrCat("unknown initializer '", name, "' (",
                                                 absl::StrJoin(InitializerNames(), ", "), ")"));
}

}  // namespace tessera::train

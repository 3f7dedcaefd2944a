#include "kvstore/lr_scheduler.h"

#include <cmath>
#include <map>
#include <optional>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace tessera::kvstore {
namespace {

absl::Status Invalid(const char* who, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(who, ": ", what));
}

// Exact text for a double, so a re-created scheduler computes the same rates.
std::string Exact(double v) { return absl::StrFormat("%.17g", v); }

std::vector<std::pair<std::string, std::string>> WarmupConfig(const Warmup& w) {
  return {{"warmup_steps", absl::StrCat(w.steps)},
          {"warmup_begin_lr", Exact(w.begin_lr)},
          {"warmup_mode", w.mode == WarmupMode::kLinear ? "linear" : "constant"}};
}

absl::Status CheckStateSize(const char* who, absl::Span<const double> state, size_t expected) {
  if (state.size() != expected) {
    return Invalid(who, absl::StrCat("saved scheduler state has ", state.size(),
                                     " values, expected ", expected));
  }
  return absl::OkStatus();
}

}  // namespace

double LRScheduler::operator()(int64_t num_update) {
  if (num_update < warmup_.steps) {
    if (warmup_.mode == WarmupMode::kConstant) return warmup_.begin_lr;
    return warmup_.begin_lr + (warmup_final_lr_ - warmup_.begin_lr) *
                                  static_cast<double>(num_update) /
                                  static_cast<double>(warmup_.steps);
  }
  return Scheduled(num_update);
}

void LRScheduler::SetBaseLr(double lr) {
  base_lr_ = lr;
  warmup_final_lr_ = lr;
}

std::vector<double> LRScheduler::SaveState() const { return {base_lr_, warmup_final_lr_}; }

absl::Status LRScheduler::LoadState(absl::Span<const double> state) {
  RETURN_IF_ERROR(CheckStateSize(name(), state, 2));
  base_lr_ = state[0];
  warmup_final_lr_ = state[1];
  return absl::OkStatus();
}

absl::Status LRScheduler::CheckCommon(const char* who, double base_lr, const Warmup& warmup) {
  if (!std::isfinite(base_lr) || base_lr < 0) {
    return Invalid(who, absl::StrCat("base_lr must be a finite number >= 0, got ", base_lr));
  }
  if (warmup.steps < 0) {
    return Invalid(who, absl::StrCat("warmup_steps must be >= 0, got ", warmup.steps));
  }
  if (!std::isfinite(warmup.begin_lr) || warmup.begin_lr < 0 || warmup.begin_lr > base_lr) {
    return Invalid(who, absl::StrCat("warmup_begin_lr must be in [0, base_lr = ", base_lr,
                                     "], got ", warmup.begin_lr));
  }
  return absl::OkStatus();
}

// ---- Factor ----

absl::StatusOr<std::unique_ptr<FactorScheduler>> FactorScheduler::Create(
    int64_t step, double factor, double stop_factor_lr, double base_lr, Warmup warmup) {
  constexpr const char* kWho = "FactorScheduler";
  RETURN_IF_ERROR(CheckCommon(kWho, base_lr, warmup));
  if (step < 1) return Invalid(kWho, absl::StrCat("step must be >= 1, got ", step));
  if (!(factor > 0 && factor <= 1)) {
    return Invalid(kWho, absl::StrCat("factor must be in (0, 1] to reduce the rate, got ", factor));
  }
  if (!std::isfinite(stop_factor_lr) || stop_factor_lr < 0) {
    return Invalid(kWho, absl::StrCat("stop_factor_lr must be >= 0, got ", stop_factor_lr));
  }
  std::unique_ptr<FactorScheduler> made(
      new FactorScheduler(step, factor, stop_factor_lr, base_lr, warmup));
  made->config_ = {{"step", absl::StrCat(step)},
                   {"factor", Exact(factor)},
                   {"stop_factor_lr", Exact(stop_factor_lr)},
                   {"base_lr", Exact(base_lr)}};
  for (auto& kv : WarmupConfig(warmup)) made->config_.push_back(kv);
  return made;
}

double FactorScheduler::Scheduled(int64_t num_update) {
  // A loop, as MXNet's: a resumed run may jump over several boundaries at once.
  while (num_update > count_ + step_) {
    count_ += step_;
    base_lr_ *= factor_;
    if (base_lr_ < stop_factor_lr_) base_lr_ = stop_factor_lr_;
  }
  return base_lr_;
}

std::vector<double> FactorScheduler::SaveState() const {
  std::vector<double> state = LRScheduler::SaveState();
  state.push_back(static_cast<double>(count_));
  return state;
}

absl::Status FactorScheduler::LoadState(absl::Span<const double> state) {
  RETURN_IF_ERROR(CheckStateSize(name(), state, 3));
  RETURN_IF_ERROR(LRScheduler::LoadState(state.subspan(0, 2)));
  count_ = static_cast<int64_t>(state[2]);
  return absl::OkStatus();
}

// ---- MultiFactor ----

absl::StatusOr<std::unique_ptr<MultiFactorScheduler>> MultiFactorScheduler::Create(
    std::vector<int64_t> steps, double factor, double base_lr, Warmup warmup) {
  constexpr const char* kWho = "MultiFactorScheduler";
  RETURN_IF_ERROR(CheckCommon(kWho, base_lr, warmup));
  if (steps.empty()) return Invalid(kWho, "steps must not be empty");
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i] < 1 || (i > 0 && steps[i] <= steps[i - 1])) {
      return Invalid(kWho, absl::StrCat("steps must be increasing integers >= 1, got [",
                                        absl::StrJoin(steps, ", "), "]"));
    }
  }
  if (!(factor > 0 && factor <= 1)) {
    return Invalid(kWho, absl::StrCat("factor must be in (0, 1] to reduce the rate, got ", factor));
  }
  std::unique_ptr<MultiFactorScheduler> made(
      new MultiFactorScheduler(steps, factor, base_lr, warmup));
  made->config_ = {{"steps", absl::StrJoin(steps, ",")},
                   {"factor", Exact(factor)},
                   {"base_lr", Exact(base_lr)}};
  for (auto& kv : WarmupConfig(warmup)) made->config_.push_back(kv);
  return made;
}

double MultiFactorScheduler::Scheduled(int64_t num_update) {
  while (next_step_ < steps_.size() && num_update > steps_[next_step_]) {
    ++next_step_;
    base_lr_ *= factor_;
  }
  return base_lr_;
}

std::vector<double> MultiFactorScheduler::SaveState() const {
  std::vector<double> state = LRScheduler::SaveState();
  state.push_back(static_cast<double>(next_step_));
  return state;
}

absl::Status MultiFactorScheduler::LoadState(absl::Span<const double> state) {
  RETURN_IF_ERROR(CheckStateSize(name(), state, 3));
  if (state[2] < 0 || state[2] > static_cast<double>(steps_.size())) {
    return Invalid(name(), absl::StrCat("saved step index ", state[2], " is out of range for ",
                                        steps_.size(), " steps"));
  }
  RETURN_IF_ERROR(LRScheduler::LoadState(state.subspan(0, 2)));
  next_step_ = static_cast<size_t>(state[2]);
  return absl::OkStatus();
}

// ---- Cosine ----

absl::StatusOr<std::unique_ptr<CosineScheduler>> CosineScheduler::Create(
    int64_t max_update, double base_lr, double final_lr, int64_t warmup_steps,
    double warmup_begin_lr, WarmupMode warmup_mode) {
  constexpr const char* kWho = "CosineScheduler";
  const Warmup warmup{warmup_steps, warmup_begin_lr, warmup_mode};
  RETURN_IF_ERROR(CheckCommon(kWho, base_lr, warmup));
  if (max_update < 1)
    return Invalid(kWho, absl::StrCat("max_update must be >= 1, got ", max_update));
  if (warmup_steps >= max_update) {
    return Invalid(kWho, absl::StrCat("warmup_steps (", warmup_steps,
                                      ") must be less than max_update (", max_update, ")"));
  }
  if (!std::isfinite(final_lr) || final_lr < 0) {
    return Invalid(kWho, absl::StrCat("final_lr must be >= 0, got ", final_lr));
  }
  std::unique_ptr<CosineScheduler> made(new CosineScheduler(max_update, base_lr, final_lr, warmup));
  made->config_ = {{"max_update", absl::StrCat(max_update)},
                   {"base_lr", Exact(base_lr)},
                   {"final_lr", Exact(final_lr)}};
  for (auto& kv : WarmupConfig(warmup)) made->config_.push_back(kv);
  return made;
}

void CosineScheduler::SetBaseLr(double lr) {
  LRScheduler::SetBaseLr(lr);
  base_lr_orig_ = lr;
}

double CosineScheduler::Scheduled(int64_t num_update) {
  // Past max_update: final_lr. (MXNet keeps the last rate it computed, which differs only
  // when no update landed on max_update itself.)
  if (num_update > max_update_) {
    base_lr_ = final_lr_;
  } else {
    const int64_t warmup_steps = max_update_ - max_steps_;
    base_lr_ = final_lr_ +
               (base_lr_orig_ - final_lr_) *
                   (1 + std::cos(std::numbers::pi * static_cast<double>(num_update - warmup_steps) /
                                 static_cast<double>(max_steps_))) /
                   2;
  }
  return base_lr_;
}

std::vector<double> CosineScheduler::SaveState() const {
  std::vector<double> state = LRScheduler::SaveState();
  state.push_back(base_lr_orig_);
  return state;
}

absl::Status CosineScheduler::LoadState(absl::Span<const double> state) {
  RETURN_IF_ERROR(CheckStateSize(name(), state, 3));
  RETURN_IF_ERROR(LRScheduler::LoadState(state.subspan(0, 2)));
  base_lr_orig_ = state[2];
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LRScheduler>> CreateLRScheduler(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& args) {
  std::map<std::string, std::string> given(args.begin(), args.end());
  const std::string who = absl::StrCat("lr scheduler \"", name, "\"");
  auto take = [&](const char* key) -> std::optional<std::string> {
    auto it = given.find(key);
    if (it == given.end()) return std::nullopt;
    std::string v = it->second;
    given.erase(it);
    return v;
  };
  auto number = [&](const char* key, double fallback) -> absl::StatusOr<double> {
    std::optional<std::string> v = take(key);
    double out = fallback;
    if (v && !absl::SimpleAtod(*v, &out)) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": ", key, "='", *v, "' is not a number"));
    }
    return out;
  };
  auto integer = [&](const char* key, int64_t fallback) -> absl::StatusOr<int64_t> {
    std::optional<std::string> v = take(key);
    int64_t out = fallback;
    if (v && !absl::SimpleAtoi(*v, &out)) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": ", key, "='", *v, "' is not an integer"));
    }
    return out;
  };
  Warmup warmup;
  ASSIGN_OR_RETURN(warmup.steps, integer("warmup_steps", 0));
  ASSIGN_OR_RETURN(warmup.begin_lr, number("warmup_begin_lr", 0));
  if (std::optional<std::string> mode = take("warmup_mode")) {
    if (*mode != "linear" && *mode != "constant") {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": warmup_mode='", *mode, "' (linear or constant)"));
    }
    warmup.mode = *mode == "linear" ? WarmupMode::kLinear : WarmupMode::kConstant;
  }
  std::unique_ptr<LRScheduler> made;
  if (name == "factor") {
    ASSIGN_OR_RETURN(int64_t step, integer("step", 0));
    ASSIGN_OR_RETURN(double factor, number("factor", 1));
    ASSIGN_OR_RETURN(double stop, number("stop_factor_lr", 1e-8));
    ASSIGN_OR_RETURN(double base_lr, number("base_lr", 0.01));
    ASSIGN_OR_RETURN(made, FactorScheduler::Create(step, factor, stop, base_lr, warmup));
  } else if (name == "multifactor") {
    std::vector<int64_t> steps;
    for (absl::string_view part : absl::StrSplit(take("steps").value_or(""), ',', absl::SkipEmpty())) {
      int64_t step = 0;
      if (!absl::SimpleAtoi(part, &step)) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": steps entry '", part, "' is not an integer"));
      }
      steps.push_back(step);
    }
    ASSIGN_OR_RETURN(double factor, number("factor", 1));
    ASSIGN_OR_RETURN(double base_lr, number("base_lr", 0.01));
    ASSIGN_OR_RETURN(made, MultiFactorScheduler::Create(steps, factor, base_lr, warmup));
  } else if (name == "cosine") {
    ASSIGN_OR_RETURN(int64_t max_update, integer("max_update", 0));
    ASSIGN_OR_RETURN(double base_lr, number("base_lr", 0.01));
    ASSIGN_OR_RETURN(double final_lr, number("final_lr", 0));
    ASSIGN_OR_RETURN(made, CosineScheduler::Create(max_update, base_lr, final_lr, warmup.steps,
                                                   warmup.begin_lr, warmup.mode));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown lr scheduler \"", name, "\" (factor, multifactor, cosine)"));
  }
  if (!given.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": unknown argument '", given.begin()->first, "'"));
  }
  return made;
}

absl::StatusOr<std::unique_ptr<LRScheduler>> LRScheduler::Clone() const {
  ASSIGN_OR_RETURN(std::unique_ptr<LRScheduler> copy, CreateLRScheduler(name(), config()));
  RETURN_IF_ERROR(copy->LoadState(SaveState()));
  return copy;
}

}  // namespace tessera::kvstore

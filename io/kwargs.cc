#include "io/kwargs.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tessera::io {

absl::Status BadKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                      absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(iter, ": bad value '", value, "' for option '",
                                                 key, "'", reason.empty() ? "" : ": ", reason));
}

absl::Status UnknownKwarg(absl::string_view iter, absl::string_view key) {
  return absl::InvalidArgumentError(absl::StrCat(iter, ": unknown option '", key, "'"));
}

absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        bool* out) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "1" || v == "true") {
    *out = true;
  } else if (v == "0" || v == "false") {
    *out = false;
  } else {
    return BadKwarg(iter, key, value, "expected true or false");
  }
  return absl::OkStatus();
}

absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        int* out) {
  return absl::SimpleAtoi(value, out) ? absl::OkStatus()
                                      : BadKwarg(iter, key, value, "expected an integer");
}

absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        uint64_t* out) {
  return absl::SimpleAtoi(value, out)
             ? absl::OkStatus()
             : BadKwarg(iter, key, value, "expected a non-negative integer");
}

absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        float* out) {
  return absl::SimpleAtof(value, out) ? absl::OkStatus()
                                      : BadKwarg(iter, key, value, "expected a number");
}

absl::Status ParseKwarg(absl::string_view iter, absl::string_view key, absl::string_view value,
                        Shape* out) {
  absl::string_view inner = absl::StripAsciiWhitespace(value);
  if (absl::ConsumePrefix(&inner, "(")) {
    if (!absl::ConsumeSuffix(&inner, ")")) return BadKwarg(iter, key, value, "unbalanced '('");
  } else if (absl::ConsumePrefix(&inner, "[")) {
    if (!absl::ConsumeSuffix(&inner, "]")) return BadKwarg(iter, key, value, "unbalanced '['");
  }
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d <= 0) {
      return BadKwarg(iter, key, value, "expected positive dimensions such as (3,28,28)");
    }
    dims.push_back(d);
  }
  if (dims.empty()) return BadKwarg(iter, key, value, "expected at least one dimension");
  *out = Shape(dims);
  return absl::OkStatus();
}

absl::Status KwargParser::Parse(const std::map<std::string, std::string>& kwargs) const {
  if (kwargs.count("round_batch") != 0 && kwargs.count("last_batch_handle") != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(iter_, ": give round_batch (MXNet's) or last_batch_handle, not both"));
  }
  for (const auto& [key, value] : kwargs) {
    auto it = fields_.find(key);
    if (it == fields_.end()) return UnknownKwarg(iter_, key);
    if (absl::Status s = it->second(value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckPart(absl::string_view iter, int part_index, int num_parts) {
  if (num_parts < 1 || part_index < 0 || part_index >= num_parts) {
    return absl::InvalidArgumentError(absl::StrCat(iter, ": part_index ", part_index,
                                                   " is not in [0, num_parts ", num_parts, ")"));
  }
  return absl::OkStatus();
}

PartRange PartOf(int64_t count, int part_index, int num_parts) {
  // Integer floor(count * k / n): MXNet's GetPart without its double rounding.
  return {count * part_index / num_parts, count * (part_index + 1) / num_parts};
}

}  // namespace tessera::io

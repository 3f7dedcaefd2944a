#include "ops/param.h"

#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tessera::ops::param_internal {

std::string Parse(absl::string_view text, bool* out) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lower == "true" || lower == "1") {
    *out = true;
  } else if (lower == "false" || lower == "0") {
    *out = false;
  } else {
    return "expected true, false, 1 or 0";
  }
  return "";
}

std::string Parse(absl::string_view text, int* out) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out) ? "" : "expected an integer";
}

std::string Parse(absl::string_view text, int64_t* out) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out) ? "" : "expected an integer";
}

std::string Parse(absl::string_view text, float* out) {
  if (!absl::SimpleAtof(absl::StripAsciiWhitespace(text), out) || !std::isfinite(*out)) {
    return "expected a finite number";
  }
  return "";
}

std::string Parse(absl::string_view text, double* out) {
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), out) || !std::isfinite(*out)) {
    return "expected a finite number";
  }
  return "";
}

std::string Parse(absl::string_view text, std::string* out) {
  *out = std::string(text);
  return "";
}

std::string Parse(absl::string_view text, Shape* out) {
  absl::StatusOr<Shape> shape = Shape::Parse(text);
  if (!shape.ok()) return "expected a shape such as (3,3)";
  *out = *std::move(shape);
  return "";
}

std::string Parse(absl::string_view text, std::vector<int>* out) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (!body.empty() && (body.front() == '(' || body.front() == '[')) {
    if (body.size() < 2 || (body.back() != ')' && body.back() != ']')) {
      return "expected a tuple of integers such as (0,-1)";
    }
    body = body.substr(1, body.size() - 2);
  }
  out->clear();
  for (absl::string_view part : absl::StrSplit(body, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int v;
    if (!absl::SimpleAtoi(part, &v)) return "expected a tuple of integers such as (0,-1)";
    out->push_back(v);
  }
  return "";
}

std::string Parse(absl::string_view text, DType* out) {
  absl::StatusOr<DType> dtype = ParseDType(absl::StripAsciiWhitespace(text));
  if (!dtype.ok()) return std::string(dtype.status().message());
  *out = *dtype;
  return "";
}

std::string Format(bool v) { return v ? "true" : "false"; }
std::string Format(int v) { return absl::StrCat(v); }
std::string Format(int64_t v) { return absl::StrCat(v); }
// Six significant digits (StrCat's, and what symbol files usually hold) when they read back
// as the same value; otherwise the shortest text that does, so a property rebuilt from
// GetParams() (the GPU operators' factories, a saved symbol) computes with the same number.
template <typename T>
std::string FormatExactly(T v) {
  std::string text = absl::StrCat(v);
  T back;
  if (Parse(text, &back).empty() && back == v) return text;
  char buffer[64];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, r.ptr);
}
std::string Format(float v) { return FormatExactly(v); }
std::string Format(double v) { return FormatExactly(v); }
std::string Format(const std::string& v) { return v; }
std::string Format(const Shape& v) { return v.ToString(); }
std::string Format(const std::vector<int>& v) {
  if (v.size() == 1) return absl::StrCat("(", v[0], ",)");
  return absl::StrCat("(", absl::StrJoin(v, ","), ")");
}
std::string Format(DType v) { return DTypeName(v); }

}  // namespace tessera::ops::param_internal

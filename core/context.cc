#include "core/context.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tessera {

std::string Context::ToString() const {
  const char* name = type == DeviceType::kGPU         ? "gpu"
                     : type == DeviceType::kCPUPinned ? "cpu_pinned"
                                                      : "cpu";
  return absl::StrCat(name, "(", id, ")");
}

absl::StatusOr<Context> Context::Parse(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  Context ctx;
  if (absl::ConsumePrefix(&rest, "cpu_pinned")) {
    ctx.type = DeviceType::kCPUPinned;
  } else if (absl::ConsumePrefix(&rest, "cpu")) {
    ctx.type = DeviceType::kCPU;
  } else if (absl::ConsumePrefix(&rest, "gpu")) {
    ctx.type = DeviceType::kGPU;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("context '", text, "': expected cpu, gpu or cpu_pinned"));
  }
  if (rest.empty()) return ctx;
  bool parenthesized = absl::ConsumePrefix(&rest, "(");
  if (parenthesized ? !absl::ConsumeSuffix(&rest, ")") : !absl::ConsumePrefix(&rest, ":")) {
    return absl::InvalidArgumentError(
        absl::StrCat("context '", text, "': expected a device id as 'gpu:1' or 'gpu(1)'"));
  }
  if (!absl::SimpleAtoi(rest, &ctx.id) || ctx.id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("context '", text, "': device id '", rest, "' is not a non-negative integer"));
  }
  return ctx;
}

}  // namespace tessera

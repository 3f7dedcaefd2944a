// Context: where a function or an array lives (device type + device id).
//
// Plain value type, thread-compatible. `Context` says where something should run; the
// engine's `RunContext` says what it was given at run time (e.g. the CUDA stream).
#ifndef TESSERA_CORE_CONTEXT_H_
#define TESSERA_CORE_CONTEXT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

enum class DeviceType : int8_t {
  kCPU = 1,
  kGPU = 2,
  // Page-locked host memory used for CPU<->GPU copies; runs on the CPU.
  kCPUPinned = 3,
};

struct Context {
  DeviceType type = DeviceType::kCPU;
  int32_t id = 0;

  static constexpr Context CPU(int32_t id = 0) { return {DeviceType::kCPU, id}; }
  static constexpr Context GPU(int32_t id = 0) { return {DeviceType::kGPU, id}; }
  static constexpr Context CPUPinned(int32_t id = 0) { return {DeviceType::kCPUPinned, id}; }

  bool is_gpu() const { return type == DeviceType::kGPU; }

  // "cpu(0)", "gpu(1)", "cpu_pinned(0)".
  std::string ToString() const;

  // Accepts "cpu", "cpu(0)", "cpu:0", "gpu:1", "gpu(1)", "cpu_pinned(0)".
  static absl::StatusOr<Context> Parse(absl::string_view text);

  friend bool operator==(const Context& a, const Context& b) {
    return a.type == b.type && a.id == b.id;
  }
  friend bool operator!=(const Context& a, const Context& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const Context& c) {
    return H::combine(std::move(h), c.type, c.id);
  }
};

}  // namespace tessera

#endif  // TESSERA_CORE_CONTEXT_H_

// Fuzz target: MXNet symbol JSON (graph/symbol_json.h). A symbol that loads must infer
// shapes and types without crashing (no shapes given: every operator sees unknowns), and its
// JSON must load again and print the same text (the writer emits only what the reader takes).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/require.h"
#include "graph/symbol.h"
#include "graph/symbol_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  auto symbol = graph::SymbolFromJson(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!symbol.ok()) return 0;
  (void)symbol->InferShape({});
  (void)symbol->InferType({});
  const std::string json = graph::SymbolToJson(*symbol);
  auto again = graph::SymbolFromJson(json);
  fuzz::RequireOk(again.status(), "SymbolFromJson(SymbolToJson(symbol))");
  fuzz::Require(graph::SymbolToJson(*again) == json, "symbol JSON round trip is stable");
  return 0;
}

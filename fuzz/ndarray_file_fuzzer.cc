// Fuzz target: Tessera's array file (TSRNDARR) and NumPy .npy (ndarray/serialization.h), both
// decoded from the same bytes. What decodes must encode and decode again to the same bytes; a
// list file (names are sorted on load, so not a map) must re-encode to exactly the input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_runtime.h"
#include "fuzz/require.h"
#include "ndarray/ndarray.h"
#include "ndarray/serialization.h"

namespace {

void CheckArrayFile(const tessera::Runtime& rt, const std::string& bytes) {
  using namespace tessera;  // NOLINT(build/namespaces)
  auto contents = DecodeArrays(rt, bytes, "<fuzz>");
  if (!contents.ok()) return;
  auto encoded = EncodeArrays(contents->arrays, contents->names);
  fuzz::RequireOk(encoded.status(), "EncodeArrays of a decoded file");
  if (!contents->named) fuzz::Require(*encoded == bytes, "list file re-encodes to its bytes");
  auto again = DecodeArrays(rt, *encoded, "<re-encoded>");
  fuzz::RequireOk(again.status(), "DecodeArrays(EncodeArrays(...))");
  auto twice = EncodeArrays(again->arrays, again->names);
  fuzz::RequireOk(twice.status(), "EncodeArrays, second time");
  fuzz::Require(*twice == *encoded, "array file round trip is stable");
}

void CheckNpy(const tessera::Runtime& rt, const std::string& bytes) {
  using namespace tessera;  // NOLINT(build/namespaces)
  auto array = DecodeNpy(rt, bytes, "<fuzz>");
  if (!array.ok()) return;
  auto encoded = EncodeNpy(*array);
  fuzz::RequireOk(encoded.status(), "EncodeNpy of a decoded array");
  auto again = DecodeNpy(rt, *encoded, "<re-encoded>");
  fuzz::RequireOk(again.status(), "DecodeNpy(EncodeNpy(...))");
  fuzz::Require(again->shape() == array->shape() && again->dtype() == array->dtype(),
                ".npy round trip keeps shape and dtype");
  auto twice = EncodeNpy(*again);
  fuzz::RequireOk(twice.status(), "EncodeNpy, second time");
  fuzz::Require(*twice == *encoded, ".npy round trip is stable");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tessera::Runtime& rt = tessera::fuzz::FuzzRuntime();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  CheckArrayFile(rt, bytes);
  CheckNpy(rt, bytes);
  return 0;
}

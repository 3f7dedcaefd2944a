// Fuzz target: MXNet's NDArray list file (ndarray/mxnet_params.h). What parses must serialize
// (as V2), parse again to the same names, shapes, dtypes and bytes, and serialize again to
// exactly the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_runtime.h"
#include "fuzz/require.h"
#include "ndarray/mxnet_params.h"
#include "ndarray/ndarray.h"

namespace {

std::string HostBytes(const tessera::NDArray& array) {
  std::string bytes(array.data().Bytes(), '\0');
  tessera::fuzz::RequireOk(array.SyncCopyToCPU(bytes.data(), array.Size()), "copy to host");
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces)
  const Runtime& rt = fuzz::FuzzRuntime();
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto contents = ParseMxnetParams(rt, bytes, "<fuzz>");
  if (!contents.ok()) return 0;
  fuzz::Require(LooksLikeMxnetParams(bytes), "a parsed file has the list magic");
  auto encoded = SerializeMxnetParams(contents->names, contents->arrays);
  fuzz::RequireOk(encoded.status(), "SerializeMxnetParams of a parsed file");
  auto again = ParseMxnetParams(rt, *encoded, "<re-encoded>");
  fuzz::RequireOk(again.status(), "ParseMxnetParams(SerializeMxnetParams(...))");
  fuzz::Require(again->named == contents->named && again->names == contents->names,
                "names survive a round trip");
  fuzz::Require(again->arrays.size() == contents->arrays.size(), "array count survives");
  for (size_t i = 0; i < again->arrays.size(); ++i) {
    const NDArray& a = contents->arrays[i];
    const NDArray& b = again->arrays[i];
    fuzz::Require(a.shape() == b.shape() && a.dtype() == b.dtype(), "shape and dtype survive");
    fuzz::Require(HostBytes(a) == HostBytes(b), "elements survive");
  }
  auto twice = SerializeMxnetParams(again->names, again->arrays);
  fuzz::RequireOk(twice.status(), "SerializeMxnetParams, second time");
  fuzz::Require(*twice == *encoded, "MXNet params round trip is stable");
  return 0;
}

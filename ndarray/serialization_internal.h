// Helpers shared by serialization.cc and npy.cc: whole-file reads and writes, and moving an
// array's bytes to and from host memory. Internal to //ndarray:serialization.
#ifndef TESSERA_NDARRAY_SERIALIZATION_INTERNAL_H_
#define TESSERA_NDARRAY_SERIALIZATION_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ndarray/ndarray.h"

namespace tessera::serialization_internal {

// NOT_FOUND / UNAVAILABLE naming the path when it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);
absl::Status WriteFile(const std::string& path, const std::string& bytes);

// Appends the array's elements (waiting for pending writes; GPU arrays copied down).
absl::Status AppendArrayData(const NDArray& array, std::string* out);
// A new array of `shape`/`dtype` on `ctx` holding the Size() elements at `data`.
absl::StatusOr<NDArray> ArrayFromBytes(const Runtime& rt, const Shape& shape, DType dtype,
                                       const char* data, Context ctx);
// product(dims) * DTypeSize(dtype), INVALID_ARGUMENT for a dimension < 1 or an overflow.
absl::StatusOr<size_t> CheckedByteSize(absl::Span<const int64_t> dims, DType dtype);

}  // namespace tessera::serialization_internal

#endif  // TESSERA_NDARRAY_SERIALIZATION_INTERNAL_H_

// Serialization of NDArrays: Tessera's own array files (a list or a name -> array map),
// NumPy .npy files, and the Tensor protobuf (proto/tensor.proto), the wire format of later
// layers.
//
// Tessera array file, version 1. Every integer is little-endian; there is no padding.
//
//   offset  size   field
//   0       8      magic, the bytes "TSRNDARR"
//   8       4      uint32 version = 1
//   12      4      uint32 flags: bit 0 set = every array has a name (a map); other bits 0
//   16      8      uint64 count, the number of arrays
//   24      ...    count entries, each:
//                    [named files only] uint32 name_length, then name_length bytes of name
//                    int32  dtype (the values of tessera::DType: 0 float32, 1 float64,
//                           2 float16, 3 uint8, 4 int32, 5 int8, 6 int64, 12 bfloat16)
//                    uint32 ndim, 1 to kMaxSerializedDims
//                    int64  dims[ndim], each >= 1
//                    data: product(dims) * sizeof(dtype) bytes, row-major, little-endian
//                          elements (float16/bfloat16 as their 16-bit patterns)
//   The file ends right after the last entry; anything after it is an error.
//
// Loading never trusts the file: every length is checked against the bytes left before
// anything is allocated, and a short, corrupt or trailing-garbage file is DATA_LOSS naming
// the file, the byte offset and what was wrong. A file that is not of this format (wrong
// magic) or of a newer version is INVALID_ARGUMENT. Names in a map are unique (a repeat is
// DATA_LOSS) and come back sorted.
//
// .npy: version 1.0 headers are written (the dict padded so the data starts at a multiple
// of 64 bytes); 1.0, 2.0 and 3.0 are read. Little-endian or byte-order-free descrs only:
// '<f4' '<f8' '<f2' '<i4' '<i8' '|u1' '|i1' (and '<u1' '<i1'). fortran_order True, other
// descrs (big-endian, bfloat16, which NumPy lacks, ...) and zero-size arrays are
// INVALID_ARGUMENT naming the file and the field. A 0-d array loads as Shape{1}.
//
// Saving waits for pending writes to each array (it reads them synchronously) and copies
// GPU arrays to the host. Loaded arrays are new arrays on the requested context.
//
// Thread safety: the functions are thread-safe; concurrent saves to one path race as files
// do. This assumes a little-endian host (checked at compile time).
#ifndef TESSERA_NDARRAY_SERIALIZATION_H_
#define TESSERA_NDARRAY_SERIALIZATION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/context.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"
#include "proto/tensor.pb.h"

namespace tessera {

inline constexpr int kMaxSerializedDims = 32;

// What a Tessera array file holds. `names` is empty for a list file, else parallel to
// `arrays`.
struct ArrayFileContents {
  bool named = false;  // a map file
  std::vector<std::string> names;
  std::vector<NDArray> arrays;
};

// ---- Tessera array files ----
absl::Status SaveArrays(const std::string& path, absl::Span<const NDArray> arrays);
absl::Status SaveArrays(const std::string& path, const std::map<std::string, NDArray>& arrays);
// Either kind of file; the names of a map file are kept in ArrayFileContents::names.
absl::StatusOr<ArrayFileContents> LoadArrayFile(const Runtime& rt, const std::string& path,
                                                Context ctx = Context::CPU());
// A list file (or a map file's arrays, names dropped), in file order.
absl::StatusOr<std::vector<NDArray>> LoadArrays(const Runtime& rt, const std::string& path,
                                                Context ctx = Context::CPU());
// A map file; a list file is INVALID_ARGUMENT.
absl::StatusOr<std::map<std::string, NDArray>> LoadArrayMap(const Runtime& rt,
                                                            const std::string& path,
                                                            Context ctx = Context::CPU());

// The same format in memory. `names` empty for a list, else one per array. `source` names
// the bytes in errors (a path, "<memory>").
absl::StatusOr<std::string> EncodeArrays(absl::Span<const NDArray> arrays,
                                         absl::Span<const std::string> names = {});
absl::StatusOr<ArrayFileContents> DecodeArrays(const Runtime& rt, const std::string& bytes,
                                               const std::string& source,
                                               Context ctx = Context::CPU());
// True when `first_bytes` (a file's first bytes) start with the magic "TSRNDARR".
bool LooksLikeArrayFile(absl::string_view first_bytes);

// ---- NumPy .npy ----
absl::Status SaveNpy(const std::string& path, const NDArray& array);
absl::StatusOr<NDArray> LoadNpy(const Runtime& rt, const std::string& path,
                                Context ctx = Context::CPU());
absl::StatusOr<std::string> EncodeNpy(const NDArray& array);
absl::StatusOr<NDArray> DecodeNpy(const Runtime& rt, const std::string& bytes,
                                  const std::string& source, Context ctx = Context::CPU());

// ---- Tensor protobuf ----
// Fills `proto` (replacing what it held) with the array's dtype, shape and data.
absl::Status ToTensorProto(const NDArray& array, Tensor* proto);
// A new array from `proto`: INVALID_ARGUMENT for an unknown dtype, a shape with no or
// non-positive dimensions, or data whose size is not product(shape) * sizeof(dtype).
absl::StatusOr<NDArray> FromTensorProto(const Runtime& rt, const Tensor& proto,
                                        Context ctx = Context::CPU());

}  // namespace tessera

#endif  // TESSERA_NDARRAY_SERIALIZATION_H_

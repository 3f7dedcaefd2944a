// MXNet's NDArray list file: what mx.nd.save writes, and so the NAME-EPOCH.params of
// Module.save_checkpoint and HybridBlock.export. Read in all four of MXNet's array layouts;
// written in the one MXNet 1.x writes by default (V2), which every mx.nd.load reads.
//
// The format, from MXNet 1.9's src/ndarray/ndarray.cc (NDArray::Save/Load, LegacyLoad and
// the list Save/Load at its end), include/mxnet/tuple.h (TShape), include/mxnet/base.h
// (Context) and dmlc-core's serializer.h (vectors and strings). Every integer is
// little-endian; there is no padding.
//
//   uint64 magic = 0x112
//   uint64 reserved (MXNet writes 0 and never reads it)
//   uint64 count, then `count` arrays, each in one of the layouts below
//   uint64 name_count: 0 (an unnamed list) or `count`; then per name uint64 length + bytes
//
// One array is one of:
//   V2  uint32 0xF993FAC9, int32 storage type, [sparse only: the storage shape], shape,
//       context, int32 type flag, [sparse only: per auxiliary array an int32 type flag and a
//       shape], data, [sparse only: the auxiliary arrays' data]
//   V3  uint32 0xF993FACA, then as V2, in NumPy shape semantics (below)
//   V1  uint32 0xF993FAC8, shape, context, int32 type flag, data
//   v0  no magic: uint32 ndim, uint32 dims[ndim], context, int32 type flag, data
// where
//   shape         int32 ndim, int64 dims[ndim]
//   context       int32 dev_type (1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared), int32 dev_id
//   storage type  0 dense, 1 row_sparse (1 auxiliary array), 2 csr (2 auxiliary arrays)
//   type flag     mshadow's: 0 float32, 1 float64, 2 float16, 3 uint8, 4 int32, 5 int8,
//                 6 int64, 7 bool, 8 int16, 9 uint16, 10 uint32, 11 uint64, 12 bfloat16
//   data          product(shape) elements (sparse: product(storage shape)), row-major
// A "none" array (no data) ends right after its shape: in v0, V1 and V2 its ndim is 0 (or -1,
// which MXNet 1.5+ writes in V2); in V3 its ndim or one of its dims is -1. In V3 an ndim of
// 0 is a scalar of one element and a dim of 0 an empty axis.
//
// What Tessera does with it:
//   - Reads v0, V1, V2 and V3; writes V2, dense, context cpu(0).
//   - The stored context is read and ignored: arrays load onto the context asked for.
//   - Type flags 0-6 and 12 load as the DType of the same value; the others (bool, int16,
//     uint16, uint32, uint64) are INVALID_ARGUMENT naming the array and the type.
//   - A V3 scalar loads as Shape{1} (as a 0-d .npy does). Arrays Tessera has no form for are
//     INVALID_ARGUMENT naming the array (index and name) and its byte offset: row_sparse and
//     csr storage, none arrays, arrays with no elements, more than kMaxSerializedDims dims.
//   - Names are kept as stored: checkpoints prefix them "arg:" and "aux:"; callers split them.
//     A repeated name is INVALID_ARGUMENT. ArrayFileContents::named is true when the file
//     has names or holds no arrays (an empty list and an empty map are the same bytes).
//
// Loading never trusts the file: every length is checked against the bytes left before
// anything is allocated, and a short or corrupt file is DATA_LOSS naming the source, the
// byte offset and the field: a name count that is neither 0 nor the array count, unknown
// storage types or type flags, negative dims, and bytes after the names (MXNet's loader
// ignores them, but mx.nd.save never writes any: they mean a damaged file). A file without
// the list magic is INVALID_ARGUMENT.
//
// Saving waits for pending writes to each array and copies GPU arrays to the host.
// Thread safety: the functions are thread-safe; concurrent saves to one path race as files
// do. Assumes a little-endian host (checked at compile time).
#ifndef TESSERA_NDARRAY_MXNET_PARAMS_H_
#define TESSERA_NDARRAY_MXNET_PARAMS_H_

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
#include "ndarray/serialization.h"

namespace tessera {

// `source` names the bytes in errors (a path, "<memory>"). Arrays come back in file order.
absl::StatusOr<ArrayFileContents> ParseMxnetParams(const Runtime& rt, absl::string_view bytes,
                                                   const std::string& source,
                                                   Context ctx = Context::CPU());
absl::StatusOr<ArrayFileContents> LoadMxnetParams(const Runtime& rt, const std::string& path,
                                                  Context ctx = Context::CPU());

// `names` empty: an unnamed list; else one per array, unique (INVALID_ARGUMENT naming the
// counts or the repeated name otherwise). A none array is INVALID_ARGUMENT.
absl::StatusOr<std::string> SerializeMxnetParams(const std::vector<std::string>& names,
                                                 absl::Span<const NDArray> arrays);
// A named file, in the map's (sorted) order.
absl::Status SaveMxnetParams(const std::string& path, const std::map<std::string, NDArray>& arrays);

// True when `first_bytes` (at least 8 of a file's first bytes) start with the list magic.
bool LooksLikeMxnetParams(absl::string_view first_bytes);

}  // namespace tessera

#endif  // TESSERA_NDARRAY_MXNET_PARAMS_H_

// Parameter files: a name -> array map in either of the two formats Tessera reads, its own
// array file (serialization.h, magic "TSRNDARR") and MXNet's NDArray list file
// (mxnet_params.h, magic 0x112), told apart by their first bytes. The one loader for every
// caller that takes a parameter file (`tessera graph run --params`, checkpoints to start
// from), so each accepts both formats.
//
// Names are kept as stored: MXNet checkpoints prefix them "arg:" / "aux:".
// Thread safety: the functions are thread-safe.
#ifndef TESSERA_NDARRAY_PARAMS_FILE_H_
#define TESSERA_NDARRAY_PARAMS_FILE_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/context.h"
#include "ndarray/ndarray.h"
#include "ndarray/runtime.h"

namespace tessera {

enum class ParamsFormat { kTessera, kMxnet };

// "tessera" or "mxnet"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<ParamsFormat> ParseParamsFormat(absl::string_view name);

// A named parameter file of either format, arrays on `ctx`, names sorted (like
// LoadArrayMap's). A file of neither format, or a list without names, is INVALID_ARGUMENT
// naming the path; a damaged one is the DATA_LOSS of its format's loader.
absl::StatusOr<std::map<std::string, NDArray>> LoadParamsFile(const Runtime& rt,
                                                              const std::string& path,
                                                              Context ctx = Context::CPU());
// The same from bytes already read; `path` names them in errors.
absl::StatusOr<std::map<std::string, NDArray>> DecodeParams(const Runtime& rt,
                                                            const std::string& bytes,
                                                            const std::string& path,
                                                            Context ctx = Context::CPU());
// `arrays` as the bytes of a parameter file in `format` (for writers that write atomically).
absl::StatusOr<std::string> EncodeParams(const std::map<std::string, NDArray>& arrays,
                                         ParamsFormat format);
// Writes `arrays` to `path` in `format` (MXNet's: the V2 layout mx.nd.load reads).
absl::Status SaveParamsFile(const std::string& path, const std::map<std::string, NDArray>& arrays,
                            ParamsFormat format);

}  // namespace tessera

#endif  // TESSERA_NDARRAY_PARAMS_FILE_H_

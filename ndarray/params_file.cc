#include "ndarray/params_file.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "ndarray/mxnet_params.h"
#include "ndarray/serialization.h"

namespace tessera {

absl::StatusOr<ParamsFormat> ParseParamsFormat(absl::string_view name) {
  if (name == "tessera") return ParamsFormat::kTessera;
  if (name == "mxnet") return ParamsFormat::kMxnet;
  return absl::InvalidArgumentError(
      absl::StrCat("parameter file format '", name, "': expected tessera or mxnet"));
}

absl::StatusOr<std::map<std::string, NDArray>> LoadParamsFile(const Runtime& rt,
                                                              const std::string& path,
                                                              Context ctx) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return DecodeParams(rt, bytes, path, ctx);
}

absl::StatusOr<std::map<std::string, NDArray>> DecodeParams(const Runtime& rt,
                                                            const std::string& bytes,
                                                            const std::string& path, Context ctx) {
  ArrayFileContents contents;
  if (LooksLikeArrayFile(bytes)) {
    ASSIGN_OR_RETURN(contents, DecodeArrays(rt, bytes, path, ctx));
  } else if (LooksLikeMxnetParams(bytes)) {
    ASSIGN_OR_RETURN(contents, ParseMxnetParams(rt, bytes, path, ctx));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a parameter file: it starts with neither \"TSRNDARR\" (a Tessera array "
                     "file) nor the uint64 0x112 (an MXNet NDArray file)"));
  }
  if (!contents.named) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds a list of ",
                                                   contents.arrays.size(),
                                                   " arrays without names; parameters need names"));
  }
  std::map<std::string, NDArray> out;
  for (size_t i = 0; i < contents.arrays.size(); ++i) {
    out.emplace(std::move(contents.names[i]), std::move(contents.arrays[i]));
  }
  return out;
}

absl::StatusOr<std::string> EncodeParams(const std::map<std::string, NDArray>& arrays,
                                         ParamsFormat format) {
  std::vector<std::string> names;
  std::vector<NDArray> values;
  for (const auto& [name, array] : arrays) {
    names.push_back(name);
    values.push_back(array);
  }
  switch (format) {
    case ParamsFormat::kTessera:
      return EncodeArrays(values, names);
    case ParamsFormat::kMxnet:
      return SerializeMxnetParams(names, values);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("EncodeParams: unknown format ", static_cast<int>(format)));
}

absl::Status SaveParamsFile(const std::string& path, const std::map<std::string, NDArray>& arrays,
                            ParamsFormat format) {
  switch (format) {
    case ParamsFormat::kTessera:
      return SaveArrays(path, arrays);
    case ParamsFormat::kMxnet:
      return SaveMxnetParams(path, arrays);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("SaveParamsFile: unknown format ", static_cast<int>(format)));
}

}  // namespace tessera

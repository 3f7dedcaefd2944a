#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/sha256.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kManifestMagic = "TSRCKPT1";
constexpr size_t kDigestHexSize = 64;
constexpr char kManifestName[] = "MANIFEST";
constexpr char kParamsName[] = "params";
constexpr char kOptimizerName[] = "optimizer.states";
constexpr char kNamePrefix[] = "ckpt-";

// Writes one file of a checkpoint and records it in `manifest`.
absl::Status WriteMember(const fs::path& folder, const std::string& name, const std::string& bytes,
                         CheckpointManifest& manifest) {
  RETURN_IF_ERROR(WriteFileAtomically((folder / name).string(), bytes));
  CheckpointManifest::File* file = manifest.add_files();
  file->set_name(name);
  file->set_bytes(bytes.size());
  file->set_sha256(Sha256Hex(bytes));
  return absl::OkStatus();
}

// The checkpoint folders of `dir`, oldest first (names sort by position).
std::vector<fs::path> CheckpointFolders(const fs::path& dir) {
  std::vector<fs::path> folders;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (entry.is_directory(error) &&
        absl::StartsWith(entry.path().filename().string(), kNamePrefix)) {
      folders.push_back(entry.path());
    }
  }
  std::sort(folders.begin(), folders.end());
  return folders;
}

bool IsComplete(const fs::path& folder) {
  std::error_code error;
  return fs::exists(folder / kManifestName, error);
}

// Keeps the newest `keep` complete checkpoints; removes incomplete folders older than
// `newest` (a write a crash cut short; a newer one may be being written by nobody else).
void Prune(const fs::path& dir, const fs::path& newest, int keep) {
  std::vector<fs::path> folders = CheckpointFolders(dir);
  int complete_seen = 0;
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    std::error_code error;
    if (IsComplete(*it)) {
      if (keep <= 0 || ++complete_seen <= keep) continue;
    } else if (*it >= newest) {
      continue;
    }
    fs::remove_all(*it, error);
    if (error) spdlog::warn("checkpoint: removing {}: {}", it->string(), error.message());
  }
}

}  // namespace

std::string CheckpointName(int epoch, int64_t batch) {
  return absl::StrFormat("%s%06d-%010d", kNamePrefix, epoch, batch);
}

absl::Status WriteCheckpoint(const std::string& dir, CheckpointContents contents, int keep) {
  CheckpointManifest& manifest = contents.manifest;
  const fs::path folder = fs::path(dir) / CheckpointName(manifest.epoch(), manifest.batch());
  std::error_code error;
  // A folder of this name holds an older take of the same position: incomplete first.
  fs::remove(folder / kManifestName, error);
  fs::create_directories(folder, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint folder ", folder.string(), ": ", error.message()));
  }
  manifest.set_version(1);
  manifest.clear_files();
  manifest.set_params_format(contents.format == ParamsFormat::kMxnet ? "mxnet" : "tessera");
  ASSIGN_OR_RETURN(std::string params, EncodeParams(contents.params, contents.format));
  RETURN_IF_ERROR(WriteMember(folder, kParamsName, params, manifest));
  RETURN_IF_ERROR(WriteMember(folder, kOptimizerName, contents.optimizer_state, manifest));
  std::string body;
  if (!manifest.SerializeToString(&body)) {
    return absl::InternalError(absl::StrCat("checkpoint ", folder.string(), ": manifest"));
  }
  RETURN_IF_ERROR(WriteFileAtomically((folder / kManifestName).string(),
                                      absl::StrCat(kManifestMagic, Sha256Hex(body), body)));
  Prune(dir, folder, keep);
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Write(CheckpointContents contents) {
  RETURN_IF_ERROR(Finish());
  pending_ = std::async(std::launch::async, [dir = dir_, keep = keep_,
                                             contents = std::move(contents)]() mutable {
    return WriteCheckpoint(dir, std::move(contents), keep);
  });
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Finish() {
  if (!pending_.valid()) return absl::OkStatus();
  return pending_.get();
}

absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& path) {
  const std::string manifest_path = (fs::path(path) / kManifestName).string();
  absl::StatusOr<std::string> bytes = ReadFileToString(manifest_path);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(absl::StrCat(
        manifest_path, " does not exist: ", path,
        " is not a complete checkpoint (a write cut short, or not a checkpoint folder)"));
  }
  if (!bytes.ok()) return bytes.status();
  const size_t header = kManifestMagic.size() + kDigestHexSize;
  if (bytes->size() < header || !absl::StartsWith(*bytes, kManifestMagic)) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": not a checkpoint manifest (no ", kManifestMagic, " header)"));
  }
  const absl::string_view digest = absl::string_view(*bytes).substr(kManifestMagic.size(), kDigestHexSize);
  const absl::string_view body = absl::string_view(*bytes).substr(header);
  if (Sha256Hex(body) != digest) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": its checksum does not match (damaged or altered)"));
  }
  CheckpointManifest manifest;
  if (!manifest.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": does not parse"));
  }
  if (manifest.version() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path, ": version ", manifest.version(), " (this build reads 1)"));
  }
  return manifest;
}

absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const Runtime& rt, const std::string& path) {
  LoadedCheckpoint loaded;
  loaded.path = path;
  ASSIGN_OR_RETURN(loaded.manifest, ReadCheckpointManifest(path));
  std::map<std::string, std::string> files;
  for (const CheckpointManifest::File& file : loaded.manifest.files()) {
    // Only the names this writer writes: nothing outside the folder can be named.
    if (file.name() != kParamsName && file.name() != kOptimizerName) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "/", kManifestName, ": names the file '", file.name(),
                       "', which is not part of a checkpoint (", kParamsName, ", ",
                       kOptimizerName, ")"));
    }
    const std::string file_path = (fs::path(path) / file.name()).string();
    ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(file_path));
    if (bytes.size() != file.bytes()) {
      return absl::DataLossError(absl::StrCat(file_path, ": ", bytes.size(),
                                              " bytes, the manifest says ", file.bytes(),
                                              " (truncated or altered)"));
    }
    if (Sha256Hex(bytes) != file.sha256()) {
      return absl::DataLossError(
          absl::StrCat(file_path, ": its SHA-256 does not match the manifest's (damaged or altered)"));
    }
    files[file.name()] = std::move(bytes);
  }
  for (const char* required : {kParamsName, kOptimizerName}) {
    if (!files.contains(required)) {
      return absl::DataLossError(
          absl::StrCat(path, "/", kManifestName, ": lists no '", required, "' file"));
    }
  }
  const std::string params_path = (fs::path(path) / kParamsName).string();
  ASSIGN_OR_RETURN(auto all, DecodeParams(rt, files[kParamsName], params_path));
  for (auto& [key, array] : all) {
    if (absl::StartsWith(key, "arg:")) {
      loaded.arg_params[key.substr(4)] = array;
    } else if (absl::StartsWith(key, "aux:")) {
      loaded.aux_params[key.substr(4)] = array;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(params_path, ": key '", key, "' is neither arg:NAME nor aux:NAME"));
    }
  }
  loaded.optimizer_state = std::move(files[kOptimizerName]);
  return loaded;
}

absl::StatusOr<std::string> NewestCheckpoint(const std::string& dir) {
  std::vector<fs::path> folders = CheckpointFolders(dir);
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    if (!IsComplete(*it)) continue;
    absl::StatusOr<CheckpointManifest> manifest = ReadCheckpointManifest(it->string());
    if (manifest.ok()) return it->string();
    spdlog::warn("checkpoint: passing over {}: {}", it->string(), manifest.status().ToString());
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in ", dir));
}

}  // namespace tessera::train

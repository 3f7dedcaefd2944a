// Whole-file reads and writes. Errors name the path, with the code absl::ErrnoToStatus gives
// the errno (NOT_FOUND for a missing file); callers add what the file is to the message.
#ifndef TESSERA_CORE_FILE_H_
#define TESSERA_CORE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Permission bits of the files WriteStringToFile writes.
inline constexpr unsigned kReadableByAll = 0644;
inline constexpr unsigned kOwnerOnly = 0600;  // secrets: private keys, tokens

// Creates or truncates `path`, and gives it `mode` (also when it existed).
absl::Status WriteStringToFile(const std::string& path, absl::string_view text,
                               unsigned mode = kReadableByAll);

// Writes `text` so that `path` holds either its old content or all of the new, never part:
// to "<path>.tmp" first, synced, then renamed over `path`, and the folder synced so that the
// rename survives a crash too. For files a crash must not leave half-written (job records,
// checkpoint manifests, plots a browser re-reads).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text,
                                 unsigned mode = kReadableByAll);

// Appends `text` to `path` (created with `mode` if missing) and syncs it: after a crash the
// file holds every earlier append whole and this one whole or in part, so a reader of an
// append-only log must tolerate (and drop) a torn last record.
absl::Status AppendToFile(const std::string& path, absl::string_view text,
                          unsigned mode = kReadableByAll);

// `status` with "<what>: " in front of its message, keeping its code (OK stays OK).
absl::Status Annotate(const absl::Status& status, absl::string_view what);

}  // namespace tessera

#endif  // TESSERA_CORE_FILE_H_

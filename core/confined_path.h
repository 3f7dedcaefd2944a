// Paths a remote request names, held inside the folder a daemon was given: a worker reads a
// job's data only under its data root and writes checkpoints only under its run root.
//
// A relative path is taken from the root. Every symbolic link is followed before the check,
// so a link inside the root that leads out is refused like an absolute path or a ".." that
// leads out. Reads must name a regular file: devices (/dev/zero), FIFOs and sockets would
// block or never end.
#ifndef TESSERA_CORE_CONFINED_PATH_H_
#define TESSERA_CORE_CONFINED_PATH_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera {

enum class PathUse {
  kReadFile,     // an existing regular file
  kReadFolder,   // an existing folder (a checkpoint's)
  kWritePrefix,  // a file name prefix (PREFIX-0001.params ...): missing folders are made
};

// The resolved absolute path. PERMISSION_DENIED naming `what` (e.g. "data.train_images"),
// the path and the root when the path leads out of `root` or is not a regular file; NOT_FOUND
// for a missing file. A prefix's missing folders are made (0755) inside `root`; '..' after
// a missing folder is refused.
absl::StatusOr<std::string> ConfinePath(const std::string& root, const std::string& path,
                                        PathUse use, const std::string& what);

}  // namespace tessera

#endif  // TESSERA_CORE_CONFINED_PATH_H_

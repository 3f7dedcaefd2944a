#include "core/confined_path.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Whether `path` is `root` or below it; both canonical.
bool Within(const fs::path& root, const fs::path& path) {
  auto r = root.begin();
  auto p = path.begin();
  for (; r != root.end() && !r->empty(); ++r, ++p) {
    if (p == path.end() || *r != *p) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ConfinePath(const std::string& root, const std::string& path,
                                        PathUse use, const std::string& what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": an empty path"));
  std::error_code error;
  const fs::path canonical_root = fs::canonical(root, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the root '", root, "' cannot be resolved: ", error.message()));
  }
  const fs::path given(path);
  const fs::path joined = given.is_absolute() ? given : canonical_root / given;
  auto outside = [&](const fs::path& resolved) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": '", path, "' leads outside this worker's ",
        use == PathUse::kReadFile ? "data root" : "run root", " '", canonical_root.string(), "'",
        resolved == joined ? "" : absl::StrCat(" (to '", resolved.string(), "')")));
  };

  if (use == PathUse::kReadFile || use == PathUse::kReadFolder) {
    const fs::path resolved = fs::canonical(joined, error);
    if (error) {
      return absl::ErrnoToStatus(error.value(), absl::StrCat(what, ": cannot open '", path, "'"));
    }
    if (!Within(canonical_root, resolved)) return outside(resolved);
    struct stat st;
    if (stat(resolved.c_str(), &st) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(what, ": cannot open '", path, "'"));
    }
    if (use == PathUse::kReadFolder) {
      if (!S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is not a folder"));
      }
      return resolved.string();
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, ": '", path, "' is not a regular file (a folder, device, FIFO or socket)"));
    }
    return resolved.string();
  }

  // A prefix: its folder is resolved, and made below its deepest existing ancestor when
  // missing (a remote client names folders of its own run, e.g. runs/NAME). The name part
  // stays as given, so ".." there is refused outright.
  const fs::path name = joined.filename();
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' names no file"));
  }
  fs::path existing = joined.parent_path();
  std::vector<fs::path> missing;  // innermost first
  while (!fs::exists(fs::symlink_status(existing, error)) && existing.has_relative_path()) {
    missing.push_back(existing.filename());
    existing = existing.parent_path();
  }
  fs::path folder = fs::canonical(existing, error);
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat(what, ": no folder '", existing.string(), "'"));
  }
  if (!Within(canonical_root, folder)) return outside(folder / name);
  for (const fs::path& part : missing) {
    if (part == ".." || part == ".") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", path, "' has '", part.string(), "' after a missing folder"));
    }
  }
  for (auto part = missing.rbegin(); part != missing.rend(); ++part) {
    folder /= *part;
    // A folder made by someone else meanwhile is taken only as a real folder, not a link.
    if (mkdir(folder.c_str(), 0755) != 0) {
      const int mkdir_error = errno;
      if (mkdir_error != EEXIST || !fs::is_directory(fs::symlink_status(folder, error))) {
        return absl::ErrnoToStatus(
            mkdir_error == EEXIST ? ENOTDIR : mkdir_error,
            absl::StrCat(what, ": cannot make the folder '", folder.string(), "'"));
      }
    }
  }
  return (folder / name).string();
}

}  // namespace tessera

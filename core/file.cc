#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace tessera {

namespace {

absl::Status WriteAll(int fd, absl::string_view text, const std::string& path) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", path, "'"));
    }
    text.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::Status SyncFolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open folder '", folder, "'"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (fsync(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot sync folder '", folder, "'"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "'"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  std::string content;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) return content;
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read '", path, "'"));
    }
    content.append(buffer, n);
  }
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view text, unsigned mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create '", path, "'"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  // Before any byte is written: an existing file keeps its old mode through open().
  if (fchmod(fd, mode) != 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot chmod '", path, "'"));
  if (absl::Status s = WriteAll(fd, text, path); !s.ok()) return s;
  std::move(close_fd).Cancel();
  if (close(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view text, unsigned mode) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  absl::Status written = [&]() -> absl::Status {
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create '", tmp, "'"));
    absl::Cleanup close_fd = [fd] { close(fd); };
    if (fchmod(fd, mode) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot chmod '", tmp, "'"));
    if (absl::Status s = WriteAll(fd, text, tmp); !s.ok()) return s;
    if (fsync(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot sync '", tmp, "'"));
    std::move(close_fd).Cancel();
    if (close(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", tmp, "'"));
    if (rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
    }
    return SyncFolderOf(path);
  }();
  if (!written.ok()) unlink(tmp.c_str());
  return written;
}

absl::Status AppendToFile(const std::string& path, absl::string_view text, unsigned mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, mode);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "'"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (absl::Status s = WriteAll(fd, text, path); !s.ok()) return s;
  if (fdatasync(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot sync '", path, "'"));
  return absl::OkStatus();
}

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace tessera

#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace tessera {

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
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", path, "'"));
    }
    text.remove_prefix(n);
  }
  std::move(close_fd).Cancel();
  if (close(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace tessera

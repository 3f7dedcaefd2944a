#include "core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::Status Errno(const std::string& what, int error) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOSPC:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

SharedMemory::SharedMemory(int fd, void* mapping, uint64_t mapped, char* data, uint64_t size,
                           std::string path)
    : fd_(fd),
      mapping_(mapping),
      mapped_(mapped),
      data_(data),
      size_(size),
      path_(std::move(path)) {}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept { *this = std::move(other); }

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this == &other) return *this;
  Release();
  fd_ = std::exchange(other.fd_, -1);
  mapping_ = std::exchange(other.mapping_, nullptr);
  mapped_ = std::exchange(other.mapped_, 0);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  path_ = std::move(other.path_);
  other.path_.clear();
  return *this;
}

SharedMemory::~SharedMemory() { Release(); }

void SharedMemory::Release() {
  if (mapping_ != nullptr) munmap(mapping_, mapped_);
  if (fd_ >= 0) close(fd_);
  mapping_ = nullptr;
  fd_ = -1;
}

absl::StatusOr<SharedMemory> SharedMemory::Create(std::string_view name, uint64_t bytes) {
  const std::string label = absl::StrCat("tessera-", std::string(name));
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory ", label, ": zero bytes"));
  }
  const int fd = memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno(absl::StrCat("memfd_create(", label, ")"), errno);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 || fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    const int error = errno;
    close(fd);
    return Errno(absl::StrCat("sizing shared memory ", label, " to ", bytes, " bytes"), error);
  }
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return Errno(absl::StrCat("mapping shared memory ", label), error);
  }
  return SharedMemory(fd, mapping, bytes, static_cast<char*>(mapping), bytes,
                      absl::StrCat("/proc/", getpid(), "/fd/", fd));
}

absl::StatusOr<SharedMemory> SharedMemory::Open(const std::string& path, uint64_t offset,
                                                uint64_t bytes) {
  // Only what path() names: another process's descriptor, never a device or a FIFO that
  // opening alone could disturb.
  const std::vector<std::string> parts = absl::StrSplit(path, '/');
  uint64_t number = 0;
  if (parts.size() != 5 || !parts[0].empty() || parts[1] != "proc" || parts[3] != "fd" ||
      !absl::SimpleAtoi(parts[2], &number) || !absl::SimpleAtoi(parts[4], &number)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory '", path, "' is not a /proc/PID/fd/FD path"));
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Errno(absl::StrCat("opening shared memory ", path), errno);
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &st) != 0 || seals < 0 || (seals & F_SEAL_SHRINK) == 0 || bytes == 0 ||
      offset > static_cast<uint64_t>(st.st_size) ||
      bytes > static_cast<uint64_t>(st.st_size) - offset) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory ", path, " is not a region sealed against shrinking that holds bytes [",
        offset, ", ", offset + bytes, ")"));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const uint64_t mapped = offset - start + bytes;
  void* mapping =
      mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  const int error = errno;
  close(fd);  // the mapping keeps the region
  if (mapping == MAP_FAILED) return Errno(absl::StrCat("mapping shared memory ", path), error);
  return SharedMemory(-1, mapping, mapped, static_cast<char*>(mapping) + (offset - start), bytes,
                      "");
}

}  // namespace tessera

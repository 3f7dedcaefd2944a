// SharedMemory: a region of memory that processes of one user on one host share, for bulk
// data that would otherwise cross a socket twice (the parameter server's same-host workers).
//
// Create makes an anonymous memfd sealed against shrinking and growing, so no process that
// maps it can truncate it under another's mapping (a read past a truncated file's end is
// SIGBUS, not an error). Another process opens it by path(), "/proc/PID/fd/FD": the kernel
// lets only processes of the same user (or root) open it, and only on this host. Open
// checks the seals before mapping, so a creator cannot truncate it under the opener either.
//
// Thread safety: an object is immutable after creation; what is stored in the memory is the
// users' business.
#ifndef TESSERA_CORE_SHARED_MEMORY_H_
#define TESSERA_CORE_SHARED_MEMORY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera {

class SharedMemory {
 public:
  // A new zero-filled region of `bytes` (> 0); `name` shows in /proc/PID/fd (e.g. "key-3").
  static absl::StatusOr<SharedMemory> Create(std::string_view name, uint64_t bytes);
  // Maps [offset, offset + bytes) of the region another process made, found at `path` (its
  // path(): "/proc/PID/fd/FD"). INVALID_ARGUMENT naming the path when it is no such path or
  // not a sealed region holding that range, PERMISSION_DENIED / NOT_FOUND when it cannot be
  // opened.
  static absl::StatusOr<SharedMemory> Open(const std::string& path, uint64_t offset,
                                           uint64_t bytes);

  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Where another process of this user opens it (Create's regions only; empty for Open's).
  const std::string& path() const { return path_; }

 private:
  SharedMemory(int fd, void* mapping, uint64_t mapped, char* data, uint64_t size, std::string path);
  void Release();

  int fd_ = -1;  // Create's memfd, kept open so that path() stays valid
  void* mapping_ = nullptr;
  uint64_t mapped_ = 0;
  char* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_SHARED_MEMORY_H_

#include "fuzz/temp_file.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace tessera::fuzz {
namespace {

std::string ScratchDir() {
  if (access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// Distinguishes the scratch paths of one process.
std::string UniqueStem() {
  static std::atomic<int> next{0};
  return ScratchDir() + "/tessera-fuzz-" + std::to_string(getpid()) + "-" +
         std::to_string(next.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace

TempFile::TempFile(const std::string& suffix) : path_(UniqueStem() + suffix) {}

TempFile::~TempFile() { unlink(path_.c_str()); }

const std::string& TempFile::Write(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path_.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path_.c_str());
    std::abort();
  }
  return path_;
}

TempDir::TempDir() {
  std::string pattern = UniqueStem() + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror(pattern.c_str());
    std::abort();
  }
  path_ = pattern;
}

TempDir::~TempDir() { rmdir(path_.c_str()); }

}  // namespace tessera::fuzz

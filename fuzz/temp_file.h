// Scratch files for fuzz targets whose loaders take only a path: one file per TempFile,
// rewritten with each input, so a fuzzing process reuses one file for millions of inputs.
// They live in /dev/shm when it is writable (no disk writes), else in $TMPDIR or /tmp, are
// named after the process id (parallel fuzzing jobs do not collide) and are removed when the
// object is destroyed (at exit for the usual function-local static).
//
// Thread-compatible: one thread at a time per object.
#ifndef TESSERA_FUZZ_TEMP_FILE_H_
#define TESSERA_FUZZ_TEMP_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::fuzz {

class TempFile {
 public:
  // `suffix` ends the name, e.g. ".rec".
  explicit TempFile(const std::string& suffix);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Replaces the file's bytes with `data` and returns its path. Aborts if it cannot write:
  // that is the machine, not the input.
  const std::string& Write(const uint8_t* data, size_t size);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// An empty folder, removed (if still empty) when the object is destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_TEMP_FILE_H_

// IdxFile: reads the IDX format of the MNIST files (LeCun et al.): a 4-byte magic number
// (0, 0, element type, number of dimensions), one big-endian uint32 per dimension, then
// the elements row-major. Only unsigned bytes (type 0x08), all MNIST uses, are supported.
//
// Open() checks the header and that the file holds exactly the bytes the header promises,
// before anything is allocated, so a corrupt count cannot ask for gigabytes:
//   NOT_FOUND         the file does not exist;
//   INVALID_ARGUMENT  wrong magic number or number of dimensions (names the file);
//   DATA_LOSS         truncated, or bytes after the data (names the file and byte offset).
//
// Thread-compatible: one thread at a time per IdxFile.
#ifndef TESSERA_IO_IDX_FILE_H_
#define TESSERA_IO_IDX_FILE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::io {

class IdxFile {
 public:
  // Opens `path`, which must hold unsigned bytes with `ndim` dimensions.
  static absl::StatusOr<IdxFile> Open(const std::string& path, int ndim);

  const std::string& path() const { return path_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Bytes per item of the first dimension (the product of the other dimensions).
  int64_t row_bytes() const { return row_bytes_; }
  // Items [begin, end) of the first dimension, row-major.
  absl::StatusOr<std::vector<uint8_t>> ReadRows(int64_t begin, int64_t end);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  IdxFile() = default;

  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
  std::vector<int64_t> dims_;
  int64_t row_bytes_ = 1;
  int64_t data_offset_ = 0;  // where the elements start
};

}  // namespace tessera::io

#endif  // TESSERA_IO_IDX_FILE_H_

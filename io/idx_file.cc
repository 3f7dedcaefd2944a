#include "io/idx_file.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::io {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

absl::Status OpenError(const std::string& path) {
  const int err = errno;
  const std::string message =
      absl::StrCat("cannot open IDX file '", path, "': ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
}

absl::Status Truncated(const std::string& path, int64_t at, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("IDX file '", path, "' is truncated: it ends at byte offset ", at, ", ", what));
}

}  // namespace

absl::StatusOr<IdxFile> IdxFile::Open(const std::string& path, int ndim) {
  if (ndim < 1 || ndim > 255) {
    return absl::InvalidArgumentError(absl::StrCat("IdxFile::Open: bad ndim ", ndim));
  }
  IdxFile f;
  f.path_ = path;
  f.file_.reset(std::fopen(path.c_str(), "rb"));
  if (f.file_ == nullptr) return OpenError(path);
  std::FILE* file = f.file_.get();
  if (std::fseek(file, 0, SEEK_END) != 0) return OpenError(path);
  const int64_t file_size = std::ftell(file);
  std::rewind(file);

  uint8_t header[4 + 4 * 255];
  const int64_t header_size = 4 + 4 * int64_t{ndim};
  const size_t got = std::fread(header, 1, header_size, file);
  if (got >= 4) {
    const uint32_t magic = uint32_t{header[0]} << 24 | uint32_t{header[1]} << 16 |
                           uint32_t{header[2]} << 8 | header[3];
    const uint32_t want = uint32_t{kUnsignedByte} << 8 | static_cast<uint32_t>(ndim);
    if (magic != want) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s' is not an IDX file of unsigned bytes with %d dimensions: magic number "
          "0x%08x, want 0x%08x",
          path, ndim, magic, want));
    }
  }
  if (static_cast<int64_t>(got) < header_size) {
    return Truncated(path, static_cast<int64_t>(got),
                     absl::StrCat("inside its ", header_size, "-byte header"));
  }
  // 128-bit so that a corrupt header (dimensions up to 2^32 each) cannot overflow.
  unsigned __int128 total = 1;
  for (int i = 0; i < ndim; ++i) {
    const uint8_t* d = header + 4 + 4 * i;
    const int64_t dim = int64_t{d[0]} << 24 | int64_t{d[1]} << 16 | int64_t{d[2]} << 8 | d[3];
    f.dims_.push_back(dim);
    total *= static_cast<uint64_t>(dim);
  }
  f.data_offset_ = header_size;
  const unsigned __int128 expected = total + static_cast<uint64_t>(header_size);
  if (expected > static_cast<uint64_t>(file_size)) {
    std::string dims;
    for (int64_t d : f.dims_) absl::StrAppend(&dims, dims.empty() ? "" : "x", d);
    return Truncated(
        path, file_size,
        absl::StrCat("but its header promises ", dims, " bytes of data from offset ", header_size));
  }
  if (expected < static_cast<uint64_t>(file_size)) {
    return absl::DataLossError(
        absl::StrCat("IDX file '", path, "' is corrupt: the data ends at byte offset ",
                     static_cast<int64_t>(expected), " but the file has ",
                     file_size - static_cast<int64_t>(expected), " more bytes"));
  }
  // 128-bit too: the rows' product is bounded by the file size only when no dimension is 0,
  // and a header of 0 items of 2^32 x 2^32 bytes each overflowed int64.
  unsigned __int128 row_bytes = 1;
  for (int i = 1; i < ndim; ++i) row_bytes *= static_cast<uint64_t>(f.dims_[i]);
  if (row_bytes > static_cast<uint64_t>(INT64_MAX)) {
    return absl::DataLossError(absl::StrCat("IDX file '", path,
                                            "' is corrupt: its rows would be larger than 2^63 "
                                            "bytes (dimensions in the header at byte offset 4)"));
  }
  f.row_bytes_ = static_cast<int64_t>(row_bytes);
  return f;
}

absl::StatusOr<std::vector<uint8_t>> IdxFile::ReadRows(int64_t begin, int64_t end) {
  if (begin < 0 || end < begin || end > dims_[0]) {
    return absl::InvalidArgumentError(absl::StrCat("IDX file '", path_, "': rows [", begin, ", ",
                                                   end, ") out of range [0, ", dims_[0], ")"));
  }
  std::vector<uint8_t> out((end - begin) * row_bytes_);
  const int64_t offset = data_offset_ + begin * row_bytes_;
  if (std::fseek(file_.get(), offset, SEEK_SET) != 0) return OpenError(path_);
  const size_t got = std::fread(out.data(), 1, out.size(), file_.get());
  if (got != out.size()) {  // the file shrank since Open
    return Truncated(path_, offset + static_cast<int64_t>(got), "while reading its data");
  }
  return out;
}

}  // namespace tessera::io

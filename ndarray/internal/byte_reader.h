// Bounds-checked reading and little-endian writing of binary files' fields, shared by the
// array file formats (serialization.cc, mxnet_params.cc) so that every length a file states
// is checked against the bytes left before anything is read or allocated, with one wording
// for the errors: DATA_LOSS naming the source, the byte offset and the field.
#ifndef TESSERA_NDARRAY_INTERNAL_BYTE_READER_H_
#define TESSERA_NDARRAY_INTERNAL_BYTE_READER_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

namespace tessera::ndarray_internal {

// Appends `value`'s bytes (the formats are little-endian, as the host is).
template <typename T>
void PutLittleEndian(std::string* out, T value) {
  char buf[sizeof(T)];
  std::memcpy(buf, &value, sizeof(T));
  out->append(buf, sizeof(T));
}

// Reads fields in order from `bytes`, which must outlive it.
class ByteReader {
 public:
  ByteReader(absl::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  size_t offset() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

  absl::Status Need(uint64_t n, absl::string_view what) const {
    if (n > left()) {
      return absl::DataLossError(absl::StrCat(source_, ": truncated at byte ", pos_, " reading ",
                                              what, " (needs ", n, " bytes, ", left(), " left of ",
                                              bytes_.size(), ")"));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Get(absl::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  absl::StatusOr<absl::string_view> Take(uint64_t n, absl::string_view what) {
    RETURN_IF_ERROR(Need(n, what));
    absl::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  absl::Status Corrupt(size_t at, absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(source_, ": corrupt at byte ", at, ": ", what));
  }

 private:
  absl::string_view bytes_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace tessera::ndarray_internal

#endif  // TESSERA_NDARRAY_INTERNAL_BYTE_READER_H_

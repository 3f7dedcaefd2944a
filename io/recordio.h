// RecordIO: the splittable binary record format of dmlc-core, which MXNet's .rec files use,
// so files written by MXNet's im2rec/recordio.py read here and the other way round.
//
// Layout: every record starts on a 4-byte boundary with a header of two little-endian
// uint32 words, kRecordIOMagic and lrec = cflag << 29 | length (length < 2^29), followed by
// `length` payload bytes and zero padding up to the next multiple of 4. A payload that
// holds the magic word at a 4-byte-aligned position is split there into parts (cflag 1 =
// first, 2 = middle, 3 = last; 0 = a whole record) and the magic words between the parts
// are dropped; the reader puts them back. Hence the magic word appears at an aligned file
// position only where a header starts, and a reader dropped at any byte offset re-syncs by
// scanning aligned words for a magic word followed by cflag 0 or 1.
//
// Index (.idx, as MXNet's MXIndexedRecordIO): one text line "key\toffset\n" per record,
// offset = byte position of the record's first header.
//
// Errors name the file and the byte offset: NOT_FOUND for a missing file, DATA_LOSS for a
// bad magic word where a header must be, a truncated record, or parts out of order.
#ifndef TESSERA_IO_RECORDIO_H_
#define TESSERA_IO_RECORDIO_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::io {

inline constexpr uint32_t kRecordIOMagic = 0xced7230a;

// Appends records to a new file. One thread at a time.
class RecordIOWriter {
 public:
  // Creates (truncates) `path`.
  static absl::StatusOr<std::unique_ptr<RecordIOWriter>> Open(const std::string& path);
  ~RecordIOWriter();  // closes; call Close() to see write errors
  RecordIOWriter(const RecordIOWriter&) = delete;
  RecordIOWriter& operator=(const RecordIOWriter&) = delete;

  // Appends one record; returns the byte offset of its first header (for the index).
  // INVALID_ARGUMENT for a record of 2^29 bytes or more.
  absl::StatusOr<uint64_t> Write(absl::string_view record);
  // Flushes and closes; the error names the file.
  absl::Status Close();
  const std::string& path() const { return path_; }

 private:
  RecordIOWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  // Writes one header and its payload, padded to a multiple of 4 bytes.
  absl::Status WritePart(uint32_t cflag, absl::string_view payload);

  std::string path_;
  std::FILE* file_;  // owned; nullptr once closed
  uint64_t offset_ = 0;
};

// Reads records sequentially from any starting point, or one at a known offset.
// ReadAt() is thread-safe (pread); Seek()/Next() are for one thread at a time.
class RecordIOReader {
 public:
  static absl::StatusOr<std::unique_ptr<RecordIOReader>> Open(const std::string& path);
  ~RecordIOReader();
  RecordIOReader(const RecordIOReader&) = delete;
  RecordIOReader& operator=(const RecordIOReader&) = delete;

  // Positions Next() at the first record that starts at or after byte `offset` (rounded up
  // to a multiple of 4), scanning forward for it; at end of file if there is none.
  absl::Status Seek(uint64_t offset);
  // Reads the record at the current position into *record and returns its start offset;
  // nullopt at end of file.
  absl::StatusOr<std::optional<uint64_t>> Next(std::string* record);
  // The record whose first header is at `offset` (from the index). DATA_LOSS naming the
  // file and offset when no record starts there.
  absl::StatusOr<std::string> ReadAt(uint64_t offset) const;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }

 private:
  RecordIOReader(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  // Reads the record at `offset` into *record (nullptr: walks its headers only, for
  // ScanRecordOffsets); sets *end to the offset just after it.
  absl::Status ReadRecord(uint64_t offset, std::string* record, uint64_t* end) const;
  friend absl::StatusOr<std::vector<uint64_t>> ScanRecordOffsets(const std::string& path,
                                                                 uint64_t begin, uint64_t end);

  std::string path_;
  int fd_;
  uint64_t size_;
  uint64_t pos_ = 0;  // Next()'s position: a record start or size_
};

// Start offsets of the records that start in [begin, end) of the file: MXNet's byte-range
// split, so parts [size*k/n, size*(k+1)/n) cover every record exactly once.
absl::StatusOr<std::vector<uint64_t>> ScanRecordOffsets(const std::string& path, uint64_t begin,
                                                        uint64_t end);

struct RecordIndexEntry {
  uint64_t key = 0;
  uint64_t offset = 0;
};
// Reads a .idx file; INVALID_ARGUMENT naming file and line for a malformed line.
absl::StatusOr<std::vector<RecordIndexEntry>> ReadRecordIndex(const std::string& path);
absl::Status WriteRecordIndex(const std::string& path,
                              const std::vector<RecordIndexEntry>& entries);

}  // namespace tessera::io

#endif  // TESSERA_IO_RECORDIO_H_

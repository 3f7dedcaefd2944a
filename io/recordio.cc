#include "io/recordio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/status_macros.h"

namespace tessera::io {
namespace {

// The format is little-endian; words are copied as they lie in memory.
static_assert(std::endian::native == std::endian::little, "RecordIO I/O assumes little-endian");

constexpr uint64_t kHeaderSize = 8;                 // magic word + lrec
constexpr uint32_t kMaxLength = uint32_t{1} << 29;  // lrec keeps 29 bits for the length
constexpr size_t kScanBlock = 64 << 10;             // Seek() reads this much per pread

uint32_t LoadWord(const char* p) {
  uint32_t word;
  std::memcpy(&word, p, sizeof(word));
  return word;
}

uint32_t CFlag(uint32_t lrec) { return lrec >> 29; }
uint32_t Length(uint32_t lrec) { return lrec & (kMaxLength - 1); }
uint64_t Padded(uint64_t length) { return (length + 3) & ~uint64_t{3}; }

absl::Status OpenError(absl::string_view what, const std::string& path) {
  const int err = errno;
  const std::string message =
      absl::StrCat("cannot open ", what, " '", path, "': ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
}

absl::Status WriteError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cannot write ", what, " '", path, "': ", std::strerror(errno)));
}

// pread until `n` bytes are in; the caller has checked them against the file size, so a
// short read means the file shrank since Open().
absl::Status ReadFull(int fd, const std::string& path, uint64_t offset, char* out, size_t n) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::UnavailableError(absl::StrCat("cannot read RecordIO file '", path,
                                                 "' at byte offset ", offset, ": ",
                                                 std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("RecordIO file '", path, "' ends at byte offset ",
                                              offset, ": it shrank while being read"));
    }
    out += got;
    offset += got;
    n -= got;
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RecordIOWriter

absl::StatusOr<std::unique_ptr<RecordIOWriter>> RecordIOWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return OpenError("RecordIO file", path);
  return std::unique_ptr<RecordIOWriter>(new RecordIOWriter(path, file));
}

RecordIOWriter::~RecordIOWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status RecordIOWriter::WritePart(uint32_t cflag, absl::string_view payload) {
  const uint32_t header[2] = {kRecordIOMagic, cflag << 29 | static_cast<uint32_t>(payload.size())};
  const char zeros[4] = {};
  const size_t padding = Padded(payload.size()) - payload.size();
  if (std::fwrite(header, 1, sizeof(header), file_) != sizeof(header) ||
      std::fwrite(payload.data(), 1, payload.size(), file_) != payload.size() ||
      std::fwrite(zeros, 1, padding, file_) != padding) {
    return WriteError("RecordIO file", path_);
  }
  offset_ += sizeof(header) + payload.size() + padding;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RecordIOWriter::Write(absl::string_view record) {
  if (record.size() >= kMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat("RecordIO file '", path_, "': a record of ",
                                                   record.size(),
                                                   " bytes is too large (the limit is 2^29 - 1)"));
  }
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("RecordIO file '", path_, "' is closed"));
  }
  const uint64_t start = offset_;
  // As dmlc-core's RecordIOWriter::WriteRecord: split at every aligned magic word and drop
  // it, so that aligned magic words in the file mark headers only.
  const size_t lower_align = record.size() & ~size_t{3};
  size_t part_begin = 0;
  for (size_t i = 0; i < lower_align; i += 4) {
    if (LoadWord(record.data() + i) != kRecordIOMagic) continue;
    RETURN_IF_ERROR(WritePart(part_begin == 0 ? 1 : 2, record.substr(part_begin, i - part_begin)));
    part_begin = i + 4;
  }
  RETURN_IF_ERROR(WritePart(part_begin == 0 ? 0 : 3, record.substr(part_begin)));
  return start;
}

absl::Status RecordIOWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  // The flush error first: fclose may overwrite errno.
  absl::Status status = std::fflush(file_) == 0 && !std::ferror(file_)
                            ? absl::OkStatus()
                            : WriteError("RecordIO file", path_);
  if (std::fclose(file_) != 0 && status.ok()) status = WriteError("RecordIO file", path_);
  file_ = nullptr;
  return status;
}

// ---------------------------------------------------------------------------------------------
// RecordIOReader

absl::StatusOr<std::unique_ptr<RecordIOReader>> RecordIOReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError("RecordIO file", path);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("RecordIO file '", path, "' is not a regular file"));
  }
  return std::unique_ptr<RecordIOReader>(
      new RecordIOReader(path, fd, static_cast<uint64_t>(st.st_size)));
}

RecordIOReader::~RecordIOReader() { ::close(fd_); }

absl::Status RecordIOReader::ReadRecord(uint64_t offset, std::string* record, uint64_t* end) const {
  if (offset % 4 != 0 || offset >= size_) {
    return absl::DataLossError(absl::StrCat(
        "RecordIO file '", path_, "': no record starts at byte offset ", offset,
        offset % 4 != 0 ? " (not a multiple of 4)" : " (at or past the end of the file)"));
  }
  if (record != nullptr) record->clear();
  uint64_t p = offset;
  for (bool first = true;; first = false) {
    if (size_ - p < kHeaderSize) {
      return absl::DataLossError(absl::StrCat("RecordIO file '", path_,
                                              "' is truncated: it ends at byte offset ", size_,
                                              " inside the record header at byte offset ", p));
    }
    char header[kHeaderSize];
    RETURN_IF_ERROR(ReadFull(fd_, path_, p, header, kHeaderSize));
    const uint32_t magic = LoadWord(header), lrec = LoadWord(header + 4);
    if (magic != kRecordIOMagic) {
      return absl::DataLossError(absl::StrFormat(
          "RecordIO file '%s': bad magic word 0x%08x at byte offset %d, where a record header "
          "must be",
          path_, magic, p));
    }
    const uint32_t cflag = CFlag(lrec), length = Length(lrec);
    if (cflag > 3) {
      return absl::DataLossError(absl::StrCat("RecordIO file '", path_, "': bad part flag ", cflag,
                                              " in the header at byte offset ", p));
    }
    if ((cflag <= 1) != first) {
      return absl::DataLossError(
          first ? absl::StrCat("RecordIO file '", path_, "': no record starts at byte offset ", p,
                               " (the header there continues a record, part flag ", cflag, ")")
                : absl::StrCat("RecordIO file '", path_, "': parts out of order in the record at",
                               " byte offset ", offset, ": the header at byte offset ", p,
                               " has part flag ", cflag, ", want 2 or 3"));
    }
    // Checked before allocating, so a corrupt length cannot ask for 512 MiB.
    const uint64_t padded = Padded(length);
    if (size_ - p - kHeaderSize < padded) {
      return absl::DataLossError(
          absl::StrCat("RecordIO file '", path_, "' is truncated: the record part at byte offset ",
                       p, " holds ", length, " bytes but the file ends at byte offset ", size_));
    }
    if (record != nullptr) {
      const size_t at = record->size();
      record->resize(at + length);
      RETURN_IF_ERROR(ReadFull(fd_, path_, p + kHeaderSize, record->data() + at, length));
    }
    p += kHeaderSize + padded;
    if (cflag == 0 || cflag == 3) break;
    if (record != nullptr) {
      record->append(reinterpret_cast<const char*>(&kRecordIOMagic), sizeof(kRecordIOMagic));
    }
  }
  *end = p;
  return absl::OkStatus();
}

absl::Status RecordIOReader::Seek(uint64_t offset) {
  pos_ = size_;
  if (offset >= size_) return absl::OkStatus();
  // Aligned magic words only occur at headers (the writer splits payloads there), so the
  // first one followed by part flag 0 or 1 is the first record start.
  std::string block(kScanBlock + 4, '\0');  // + 4: the lrec after a magic in the last word
  for (uint64_t p = Padded(offset); p + kHeaderSize <= size_; p += kScanBlock) {
    const size_t n = std::min<uint64_t>(block.size(), size_ - p);
    RETURN_IF_ERROR(ReadFull(fd_, path_, p, block.data(), n));
    for (size_t i = 0; i + kHeaderSize <= n; i += 4) {
      if (LoadWord(block.data() + i) == kRecordIOMagic &&
          CFlag(LoadWord(block.data() + i + 4)) <= 1) {
        pos_ = p + i;
        return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<uint64_t>> RecordIOReader::Next(std::string* record) {
  if (pos_ >= size_) return std::nullopt;
  const uint64_t start = pos_;
  RETURN_IF_ERROR(ReadRecord(start, record, &pos_));
  return start;
}

absl::StatusOr<std::string> RecordIOReader::ReadAt(uint64_t offset) const {
  std::string record;
  uint64_t end;
  RETURN_IF_ERROR(ReadRecord(offset, &record, &end));
  return record;
}

absl::StatusOr<std::vector<uint64_t>> ScanRecordOffsets(const std::string& path, uint64_t begin,
                                                        uint64_t end) {
  ASSIGN_OR_RETURN(std::unique_ptr<RecordIOReader> reader, RecordIOReader::Open(path));
  RETURN_IF_ERROR(reader->Seek(begin));
  // Records follow each other without gaps, so from the first start on only headers are read.
  std::vector<uint64_t> offsets;
  for (uint64_t p = reader->pos_; p < std::min(end, reader->size_);) {
    offsets.push_back(p);
    RETURN_IF_ERROR(reader->ReadRecord(p, nullptr, &p));
  }
  return offsets;
}

// ---------------------------------------------------------------------------------------------
// Index

absl::StatusOr<std::vector<RecordIndexEntry>> ReadRecordIndex(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return Annotate(text.status(), "RecordIO index");
  std::vector<RecordIndexEntry> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);  // as MXNet's line.strip()
    if (line.empty()) continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    RecordIndexEntry entry;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &entry.key) ||
        !absl::SimpleAtoi(fields[1], &entry.offset)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RecordIO index '", path, "' line ", line_number, ": want \"key<TAB>offset\", got \"",
          absl::CHexEscape(line.substr(0, 80)), "\""));
    }
    entries.push_back(entry);
  }
  return entries;
}

absl::Status WriteRecordIndex(const std::string& path,
                              const std::vector<RecordIndexEntry>& entries) {
  std::string text;
  for (const RecordIndexEntry& e : entries) absl::StrAppend(&text, e.key, "\t", e.offset, "\n");
  return Annotate(WriteStringToFile(path, text), "RecordIO index");
}

}  // namespace tessera::io

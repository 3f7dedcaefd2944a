#include "io/csv_iter.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "io/kwargs.h"
#include "spdlog/spdlog.h"

namespace tessera::io {
namespace {

constexpr char kIter[] = "CSVIter";

// One CSV file read whole, with what each of its lines must hold.
struct CsvFile {
  std::string path;
  const char* option;  // "data_shape" or "label_shape", for messages
  Shape shape;
  int64_t width = 0;  // values per line: shape.Size()
  std::string text;
};

// Walks the lines of an in-memory file: '\n' ends a line, a '\r' before it is dropped.
class LineCursor {
 public:
  explicit LineCursor(absl::string_view text) : rest_(text) {}

  bool Next(absl::string_view* line) {
    if (rest_.empty()) return false;
    const size_t end = std::min(rest_.find('\n'), rest_.size());
    *line = rest_.substr(0, end);
    rest_.remove_prefix(std::min(end + 1, rest_.size()));
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    return true;
  }

 private:
  absl::string_view rest_;
};

bool IsBlank(absl::string_view line) { return absl::StripAsciiWhitespace(line).empty(); }

// Samples in a file: its lines up to the last non-blank one.
int64_t CountSamples(absl::string_view text) {
  LineCursor lines(text);
  absl::string_view line;
  int64_t count = 0, samples = 0;
  while (lines.Next(&line)) {
    ++count;
    if (!IsBlank(line)) samples = count;
  }
  return samples;
}

absl::StatusOr<int64_t> ValuesPerLine(const Shape& shape, absl::string_view option) {
  if (shape.ndim() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kIter, ": ", option, " is required"));
  }
  int64_t size = 1;
  for (int64_t d : shape) {
    if (d <= 0 || __builtin_mul_overflow(size, d, &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kIter, ": ", option, " ", shape.ToString(),
                       " must have positive dimensions whose product fits int64"));
    }
  }
  return size;
}

absl::StatusOr<CsvFile> ReadCsv(const std::string& path, const char* option, const Shape& shape) {
  CsvFile file{path, option, shape, 0, {}};
  ASSIGN_OR_RETURN(file.width, ValuesPerLine(shape, option));
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return Annotate(text.status(), kIter);
  file.text = *std::move(text);
  return file;
}

// absl::SimpleAto*'s leniency (spaces around the value, a leading '+') on
// std::from_chars, which GCC 12 implements with fast_float: 3x faster than SimpleAtof.
// Values out of T's range are rejected.
template <typename T>
bool ParseValue(absl::string_view s, T* out) {
  s = absl::StripAsciiWhitespace(s);
  if (absl::ConsumePrefix(&s, "+") && absl::StartsWith(s, "-")) return false;
  const char* end = s.data() + s.size();
  const std::from_chars_result result = std::from_chars(s.data(), end, *out);
  return result.ec == std::errc() && result.ptr == end;
}

const char* Expected(float*) { return "a number within float32"; }
const char* Expected(int32_t*) { return "an integer within int32"; }
const char* Expected(int64_t*) { return "an integer within int64"; }

// Appends line `index` (0-based) of `file`, parsed as T, to `bytes`; on error `bytes`
// is unchanged. Values are parsed where they lie in the file text: no string per value.
template <typename T>
absl::Status AppendLine(const CsvFile& file, int64_t index, absl::string_view line,
                        std::vector<uint8_t>* bytes) {
  // Counted first: a wrong count usually means a wrong shape option, which this names.
  // It also bounds the allocation below by the line's length.
  const int64_t found = IsBlank(line) ? 0 : std::count(line.begin(), line.end(), ',') + 1;
  if (found != file.width) {
    return absl::InvalidArgumentError(
        absl::StrCat(kIter, ": '", file.path, "' line ", index + 1, ": expected ", file.width,
                     " values (", file.option, " ", file.shape.ToString(), "), found ", found));
  }
  const size_t old_size = bytes->size();
  bytes->resize(old_size + file.width * sizeof(T));
  T* out = reinterpret_cast<T*>(bytes->data() + old_size);
  for (int64_t column = 0; column < file.width; ++column) {
    const size_t comma = std::min(line.find(','), line.size());
    const absl::string_view value = line.substr(0, comma);
    if (!ParseValue(value, out + column)) {
      bytes->resize(old_size);
      constexpr size_t kShown = 40;  // of a value that may be a whole misdelimited line
      const absl::string_view shown = absl::StripAsciiWhitespace(value);
      return absl::InvalidArgumentError(
          absl::StrCat(kIter, ": '", file.path, "' line ", index + 1, ", column ", column + 1,
                       ": '", shown.substr(0, kShown), shown.size() > kShown ? "...' " : "' ",
                       "is not ", Expected(out)));
    }
    line.remove_prefix(std::min(comma + 1, line.size()));
  }
  return absl::OkStatus();
}

// This part's samples, parsed.
struct Part {
  HostArray data, label;
  std::vector<int64_t> lines;  // file line of each sample, 0-based
  int64_t skipped = 0;
  absl::Status first_bad;
};

template <typename T>
absl::StatusOr<Part> LoadPart(const CsvFile& data, const CsvFile* label, PartRange range,
                              const CSVIterOptions& o) {
  const int64_t rows = range.end - range.begin;
  Part part;
  // For as many lines as the file can hold (a value takes at least one byte), so that an
  // absurd shape is rejected on its first line before it reaches the allocator.
  const auto reserve = [rows](const CsvFile& file, size_t value_bytes, HostArray* array) {
    const int64_t fit = std::min<int64_t>(rows, file.text.size() / file.width);
    array->bytes.reserve(fit * file.width * value_bytes);
  };
  reserve(data, sizeof(T), &part.data);
  if (label != nullptr) reserve(*label, sizeof(float), &part.label);
  part.lines.reserve(rows);

  LineCursor data_lines(data.text);
  LineCursor label_lines(label != nullptr ? absl::string_view(label->text) : absl::string_view());
  absl::string_view data_line, label_line;
  for (int64_t index = 0; index < range.end; ++index) {
    // Both files hold at least range.end lines (counted by CountSamples).
    data_lines.Next(&data_line);
    if (label != nullptr) label_lines.Next(&label_line);
    if (index < range.begin) continue;

    const size_t data_size = part.data.bytes.size();
    absl::Status status = AppendLine<T>(data, index, data_line, &part.data.bytes);
    if (status.ok() && label != nullptr) {
      status = AppendLine<float>(*label, index, label_line, &part.label.bytes);
      if (!status.ok()) part.data.bytes.resize(data_size);
    }
    if (status.ok()) {
      part.lines.push_back(index);
    } else if (!o.skip_bad) {
      return status;
    } else if (part.skipped++ == 0) {
      part.first_bad = std::move(status);
    }
  }

  const int64_t n = static_cast<int64_t>(part.lines.size());
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kIter, ": every line of part ", o.part_index, " of ", o.num_parts, " of '", data.path,
        "' is bad (", rows, " of them); the first: ", part.first_bad.message()));
  }
  if (label == nullptr) {  // MXNet's labels without a file: 0.0f, whose bytes are all 0
    part.label.bytes.assign(n * o.label_shape.Size() * sizeof(float), 0);
  }
  part.data.name = o.data_name;
  part.data.dtype = o.dtype;
  part.data.shape = Shape{n};
  for (int64_t d : o.data_shape) part.data.shape.push_back(d);
  part.label.name = o.label_name;
  part.label.dtype = DType::kFloat32;
  part.label.shape = Shape{n};
  if (o.label_shape != Shape{1}) {
    for (int64_t d : o.label_shape) part.label.shape.push_back(d);
  }
  return part;
}

}  // namespace

absl::StatusOr<CSVIterOptions> CSVIterOptions::FromKwargs(
    const std::map<std::string, std::string>& kwargs) {
  CSVIterOptions o;
  RETURN_IF_ERROR(KwargParser(kIter)
                      .BatchingOptions(&o)
                      .Field("data_csv", &o.data_csv)
                      .Field("data_shape", &o.data_shape)
                      .Custom("label_csv",
                              [&o](const std::string& value) {
                                o.label_csv = value == "NULL" ? "" : value;  // MXNet's "none"
                                return absl::OkStatus();
                              })
                      .Field("label_shape", &o.label_shape)
                      .Custom("dtype",
                              [&o](const std::string& value) {
                                auto dtype = value == "None" ? DType::kFloat32 : ParseDType(value);
                                if (!dtype.ok()) {
                                  return BadKwarg(kIter, "dtype", value,
                                                  "expected float32, int32 or int64");
                                }
                                o.dtype = *dtype;
                                return absl::OkStatus();
                              })
                      .Field("skip_bad", &o.skip_bad)
                      .Parse(kwargs));
  return o;
}

absl::StatusOr<std::unique_ptr<CSVIter>> CSVIter::Create(const Runtime& rt,
                                                         const CSVIterOptions& options) {
  if (options.data_csv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kIter, ": data_csv is required"));
  }
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kIter, ": batch_size must be positive, got ", options.batch_size));
  }
  if (options.dtype != DType::kFloat32 && options.dtype != DType::kInt32 &&
      options.dtype != DType::kInt64) {
    return absl::InvalidArgumentError(absl::StrCat(kIter, ": dtype ", DTypeName(options.dtype),
                                                   " is not float32, int32 or int64"));
  }
  RETURN_IF_ERROR(CheckPart(kIter, options.part_index, options.num_parts));
  // Also without a label file, whose zero labels it shapes.
  RETURN_IF_ERROR(ValuesPerLine(options.label_shape, "label_shape").status());
  ASSIGN_OR_RETURN(const CsvFile data, ReadCsv(options.data_csv, "data_shape", options.data_shape));
  std::optional<CsvFile> label;
  if (!options.label_csv.empty()) {
    ASSIGN_OR_RETURN(label, ReadCsv(options.label_csv, "label_shape", options.label_shape));
  }

  const int64_t count = CountSamples(data.text);
  if (label.has_value()) {
    const int64_t label_count = CountSamples(label->text);
    if (label_count != count) {
      return absl::InvalidArgumentError(absl::StrCat(kIter, ": data file '", data.path, "' has ",
                                                     count, " lines but label file '", label->path,
                                                     "' has ", label_count));
    }
  }
  const PartRange range = PartOf(count, options.part_index, options.num_parts);
  if (range.begin == range.end) {
    return absl::InvalidArgumentError(absl::StrCat(kIter, ": part ", options.part_index, " of ",
                                                   options.num_parts, " of '", data.path, "' (",
                                                   count, " lines) is empty"));
  }

  const CsvFile* label_file = label.has_value() ? &*label : nullptr;
  absl::StatusOr<Part> loaded =
      options.dtype == DType::kInt32   ? LoadPart<int32_t>(data, label_file, range, options)
      : options.dtype == DType::kInt64 ? LoadPart<int64_t>(data, label_file, range, options)
                                       : LoadPart<float>(data, label_file, range, options);
  if (!loaded.ok()) return loaded.status();
  Part& part = *loaded;
  if (part.skipped > 0) {
    spdlog::warn(
        "CSVIter: skip_bad: skipped {} of the {} lines of part {}/{} of '{}'{}; the first: {}",
        part.skipped, range.end - range.begin, options.part_index, options.num_parts, data.path,
        label.has_value() ? absl::StrCat(" and '", label->path, "'") : "",
        std::string(part.first_bad.message()));
  }

  const NDArrayIterOptions inner_options{options.batch_size, options.shuffle, options.seed,
                                         options.last_batch_handle};
  std::vector<HostArray> data_arrays, label_arrays;
  data_arrays.push_back(std::move(part.data));
  label_arrays.push_back(std::move(part.label));
  std::unique_ptr<CSVIter> it(new CSVIter());
  ASSIGN_OR_RETURN(it->inner_, NDArrayIter::FromHost(rt, std::move(data_arrays),
                                                     std::move(label_arrays), inner_options));
  it->lines_ = std::move(part.lines);
  it->skipped_ = part.skipped;
  if (!options.silent) {
    spdlog::info(
        "CSVIter: loaded {} samples (lines [{}, {}) of {}, part {}/{}) from '{}', "
        "shuffle={}, data {}, label {}",
        it->num_samples(), range.begin, range.end, count, options.part_index, options.num_parts,
        data.path, options.shuffle, it->provide_data()[0].shape.ToString(),
        it->provide_label()[0].shape.ToString());
  }
  return it;
}

absl::StatusOr<bool> CSVIter::Next() {
  ASSIGN_OR_RETURN(const bool more, inner_->Next());
  if (!more) return false;
  batch_ = inner_->Value();
  for (int64_t& i : batch_.index) i = lines_[i];  // row of the part -> line of the file
  return true;
}

}  // namespace tessera::io

#include "io/image_pack.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "io/image_augment.h"
#include "io/image_codec.h"
#include "io/image_record.h"
#include "io/recordio.h"
#include "spdlog/spdlog.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

// One image to pack, in source order.
struct Item {
  uint64_t id = 0;  // the list's index; a folder's items are numbered as they are packed
  std::vector<float> labels;
  fs::path file;
  std::string name;  // folder source: "class/file", as the written .lst names it
};

bool HasImageExtension(const fs::path& file) {
  const std::string ext = absl::AsciiStrToLower(file.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

bool IsPng(absl::string_view bytes) {
  return absl::StartsWith(bytes, absl::string_view("\x89PNG\r\n\x1a\n", 8));
}

// The whole file, errors saying what it is ("image list", "image").
absl::StatusOr<std::string> ReadFile(absl::string_view what, const fs::path& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path.string());
  if (!bytes.ok()) return Annotate(bytes.status(), what);
  return bytes;
}

// The entries of `dir` sorted by name, so that packing does not depend on the file system's
// order.
absl::StatusOr<std::vector<fs::directory_entry>> SortedEntries(const fs::path& dir) {
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(*it);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot list folder '", dir.string(), "': ", ec.message()));
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  return entries;
}

absl::StatusOr<std::vector<Item>> ListFolder(const fs::path& source, PackSummary* summary) {
  std::vector<Item> items;
  ASSIGN_OR_RETURN(const std::vector<fs::directory_entry> classes, SortedEntries(source));
  for (const fs::directory_entry& class_dir : classes) {
    std::error_code ec;
    if (!class_dir.is_directory(ec)) {
      ++summary->skipped_other;
      continue;
    }
    const std::string class_name = class_dir.path().filename().string();
    const float label = static_cast<float>(summary->classes.size());
    summary->classes.push_back(class_name);
    ASSIGN_OR_RETURN(const std::vector<fs::directory_entry> files, SortedEntries(class_dir));
    for (const fs::directory_entry& file : files) {
      if (!file.is_regular_file(ec)) continue;  // nested folders: classes are one level deep
      if (!HasImageExtension(file.path())) {
        ++summary->skipped_other;
        continue;
      }
      items.push_back({0,
                       {label},
                       file.path(),
                       absl::StrCat(class_name, "/", file.path().filename().string())});
    }
  }
  return items;
}

// im2rec's list: "index\tlabel[\tlabel...]\tpath", fields stripped, blank lines skipped.
absl::StatusOr<std::vector<Item>> ReadImageList(const fs::path& list, const fs::path& root) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile("image list", list));
  std::vector<Item> items;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    for (absl::string_view& f : fields) f = absl::StripAsciiWhitespace(f);
    Item item;
    bool ok = fields.size() >= 3 && absl::SimpleAtoi(fields[0], &item.id) && !fields.back().empty();
    for (size_t i = 1; ok && i + 1 < fields.size(); ++i) {
      item.labels.emplace_back();
      ok = absl::SimpleAtof(fields[i], &item.labels.back());
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("image list '", list.string(), "' line ", line_number,
                       ": want \"index<TAB>label[<TAB>label...]<TAB>path\", got \"",
                       absl::CHexEscape(line.substr(0, 200)), "\""));
    }
    item.file = root / std::string(fields.back());
    items.push_back(std::move(item));
  }
  return items;
}

absl::Status CheckOptions(const PackOptions& o) {
  if (o.output.empty()) return absl::InvalidArgumentError("PackImages: no output prefix");
  if (o.resize < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackImages: resize must be 0 or positive, got ", o.resize));
  }
  if (o.quality < 1 || o.quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackImages: quality must be in [1, 100], got ", o.quality));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PackSummary> PackImages(const PackOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  const fs::path source(options.source);
  std::error_code ec;
  const fs::file_status status = fs::status(source, ec);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat("image source '", options.source, "' does not exist"));
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot stat image source '", options.source, "': ", ec.message()));
  }
  const bool folder = fs::is_directory(status);
  if (!folder && !(fs::is_regular_file(status) && source.extension() == ".lst")) {
    return absl::InvalidArgumentError(
        absl::StrCat("image source '", options.source, "' is neither a folder nor a .lst file"));
  }

  PackSummary summary;
  std::vector<Item> items;
  if (folder) {
    ASSIGN_OR_RETURN(items, ListFolder(source, &summary));
  } else {
    ASSIGN_OR_RETURN(items, ReadImageList(source, options.root.empty() ? source.parent_path()
                                                                       : fs::path(options.root)));
  }

  const std::string rec_path = options.output + ".rec";
  ASSIGN_OR_RETURN(std::unique_ptr<RecordIOWriter> writer, RecordIOWriter::Open(rec_path));
  std::vector<RecordIndexEntry> index;
  std::string list;  // the .lst of a folder source
  for (Item& item : items) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile("image", item.file));
    absl::StatusOr<Image> image = DecodeImage(bytes, /*channels=*/0);
    if (!image.ok()) {
      const absl::Status bad = absl::InvalidArgumentError(absl::StrCat(
          "cannot decode image '", item.file.string(), "': ", image.status().message()));
      if (!options.skip_bad) return bad;
      spdlog::warn("PackImages: skipping it: {}", std::string(bad.message()));
      ++summary.skipped_bad;
      continue;
    }
    if (options.resize > 0) {
      const Image resized = ResizeShorter(*image, options.resize);
      absl::StatusOr<std::string> encoded =
          IsPng(bytes) ? EncodePng(resized) : EncodeJpeg(resized, options.quality);
      if (!encoded.ok()) {
        return absl::Status(encoded.status().code(),
                            absl::StrCat("cannot re-encode image '", item.file.string(),
                                         "': ", encoded.status().message()));
      }
      bytes = std::move(encoded).value();
    }
    if (folder) {
      item.id = static_cast<uint64_t>(summary.records);
      // Labels as im2rec writes them ("%f").
      absl::StrAppend(&list, item.id, "\t", absl::StrFormat("%f", item.labels[0]), "\t", item.name,
                      "\n");
    }
    ASSIGN_OR_RETURN(const uint64_t offset,
                     writer->Write(PackImageRecord(item.labels, item.id, 0, bytes)));
    index.push_back({item.id, offset});
    ++summary.records;
  }
  RETURN_IF_ERROR(writer->Close());
  RETURN_IF_ERROR(WriteRecordIndex(options.output + ".idx", index));
  if (folder) RETURN_IF_ERROR(Annotate(WriteStringToFile(options.output + ".lst", list), "image list"));
  summary.bytes = fs::file_size(rec_path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot stat RecordIO file '", rec_path, "': ", ec.message()));
  }

  spdlog::info(
      "PackImages: packed {} images from {}{} into {} ({} bytes); skipped {} undecodable "
      "images and {} other files",
      summary.records, options.source,
      folder ? absl::StrCat(" (", summary.classes.size(), " classes)") : "", rec_path,
      summary.bytes, summary.skipped_bad, summary.skipped_other);
  return summary;
}

}  // namespace tessera::io

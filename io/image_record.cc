#include "io/image_record.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::io {
namespace {

// The layout is little-endian; fields are copied as they lie in memory.
static_assert(std::endian::native == std::endian::little, "image records assume little-endian");

// MXNet's IRHeader, 24 bytes: struct.Struct('IfQQ').
constexpr size_t kFlagAt = 0, kLabelAt = 4, kIdAt = 8, kId2At = 16, kHeaderSize = 24;

template <typename T>
void Store(const T& value, char* out) {
  std::memcpy(out, &value, sizeof(T));
}

template <typename T>
T Load(const char* in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  return value;
}

}  // namespace

std::string PackImageRecord(const std::vector<float>& labels, uint64_t id, uint64_t id2,
                            absl::string_view image) {
  // One label goes in the header with flag 0; any other count (none included, as MXNet's
  // pack of an empty label array) goes after it with flag = count and header label 0.
  const bool in_header = labels.size() == 1;
  const size_t extra = in_header ? 0 : labels.size() * sizeof(float);
  std::string record(kHeaderSize + extra, '\0');
  Store(static_cast<uint32_t>(in_header ? 0 : labels.size()), record.data() + kFlagAt);
  Store(in_header ? labels[0] : 0.0f, record.data() + kLabelAt);
  Store(id, record.data() + kIdAt);
  Store(id2, record.data() + kId2At);
  if (extra > 0) std::memcpy(record.data() + kHeaderSize, labels.data(), extra);
  record.append(image.data(), image.size());
  return record;
}

absl::StatusOr<ImageRecord> UnpackImageRecord(absl::string_view record) {
  if (record.size() < kHeaderSize) {
    return absl::DataLossError(absl::StrCat("image record of ", record.size(),
                                            " bytes is shorter than its 24-byte header"));
  }
  const uint32_t flag = Load<uint32_t>(record.data() + kFlagAt);
  ImageRecord out;
  out.id = Load<uint64_t>(record.data() + kIdAt);
  out.id2 = Load<uint64_t>(record.data() + kId2At);
  const uint64_t labels_end = kHeaderSize + uint64_t{flag} * sizeof(float);
  if (record.size() < labels_end) {
    return absl::DataLossError(absl::StrCat("image record ", out.id, " of ", record.size(),
                                            " bytes is shorter than its header and ", flag,
                                            " labels (", labels_end, " bytes)"));
  }
  if (flag == 0) {
    out.labels = {Load<float>(record.data() + kLabelAt)};
  } else {
    out.labels.resize(flag);
    std::memcpy(out.labels.data(), record.data() + kHeaderSize, flag * sizeof(float));
  }
  out.image = record.substr(labels_end);
  return out;
}

}  // namespace tessera::io

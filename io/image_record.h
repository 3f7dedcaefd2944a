// The payload of one record in an image .rec file, as MXNet's recordio.pack/unpack:
// a 24-byte little-endian header {uint32 flag; float32 label; uint64 id; uint64 id2},
// then, when flag > 0, `flag` float32 labels (and the header's label is 0), then the
// encoded image (JPEG or PNG bytes).
#ifndef TESSERA_IO_IMAGE_RECORD_H_
#define TESSERA_IO_IMAGE_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::io {

struct ImageRecord {
  std::vector<float> labels;  // one label: stored in the header; more: after it
  uint64_t id = 0, id2 = 0;
  absl::string_view image;  // points into the unpacked record's bytes
};

// An empty `labels` packs as flag 0 and label 0, so it unpacks as one label 0 (as MXNet).
std::string PackImageRecord(const std::vector<float>& labels, uint64_t id, uint64_t id2,
                            absl::string_view image);
// DATA_LOSS when the record is shorter than its header and labels say.
absl::StatusOr<ImageRecord> UnpackImageRecord(absl::string_view record);

}  // namespace tessera::io

#endif  // TESSERA_IO_IMAGE_RECORD_H_

// Packing images into RecordIO (MXNet's tools/im2rec): `./tessera data pack` is a thin
// shell over PackImages.
//
// Sources:
//   - a folder with one sub-folder per class: classes are the sub-folder names in sorted
//     order, labelled 0, 1, ...; images are the files with a .jpg/.jpeg/.png extension (any
//     case) inside each, in sorted order; other files are skipped and counted.
//   - an image list (.lst, as im2rec): lines "index\tlabel[\tlabel...]\trelative/path",
//     paths relative to `root` (default: the list's folder).
// Every image is decoded once to check it (an undecodable file is an error naming it, or
// skipped and counted with skip_bad); with resize > 0 it is re-encoded with its shorter side
// resized to `resize` (JPEG at `quality`, PNG stays PNG); else its bytes are stored as they
// are. Records are written in source order with id = index (folder: the running number),
// into `output`.rec, `output`.idx and, for a folder, `output`.lst listing what was packed.
#ifndef TESSERA_IO_IMAGE_PACK_H_
#define TESSERA_IO_IMAGE_PACK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::io {

struct PackOptions {
  std::string source;  // a folder of class sub-folders, or a .lst file
  std::string output;  // prefix: writes output.rec, output.idx (and output.lst)
  std::string root;    // for a .lst: folder its paths are relative to ("": the list's folder)
  int resize = 0;      // > 0: shorter side resized to this many pixels
  int quality = 95;    // JPEG quality when re-encoding
  bool skip_bad = false;
};

struct PackSummary {
  int64_t records = 0;
  int64_t skipped_bad = 0;    // undecodable images left out (skip_bad)
  int64_t skipped_other = 0;  // files without an image extension (folder source)
  std::vector<std::string> classes;  // folder source: label i is classes[i]
  uint64_t bytes = 0;                // size of the .rec file
};

// INVALID_ARGUMENT / NOT_FOUND naming the source, list line or image file.
absl::StatusOr<PackSummary> PackImages(const PackOptions& options);

}  // namespace tessera::io

#endif  // TESSERA_IO_IMAGE_PACK_H_

// Image decoding and encoding: JPEG through libjpeg-turbo, PNG through libpng (Debian's
// libjpeg62-turbo-dev and libpng-dev). Corrupt input is an error, never a crash or exit:
// both libraries report errors through setjmp/longjmp handlers installed here.
#ifndef TESSERA_IO_IMAGE_CODEC_H_
#define TESSERA_IO_IMAGE_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::io {

// An 8-bit image, rows top to bottom, channels interleaved (HWC): 1 = gray, 3 = RGB.
struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels

  uint8_t& at(int y, int x, int c) { return pixels[(static_cast<size_t>(y) * width + x) * channels + c]; }
  uint8_t at(int y, int x, int c) const {
    return pixels[(static_cast<size_t>(y) * width + x) * channels + c];
  }
};

// Decodes JPEG or PNG, told apart by their signatures. `channels`: 3 gives RGB (gray is
// replicated, alpha dropped), 1 gives gray (luma of RGB), 0 keeps the file's (1 or 3).
// INVALID_ARGUMENT for neither format or a bad `channels`; DATA_LOSS for a corrupt or
// truncated image, with the library's message (libjpeg's corrupt-data warnings count as
// errors); RESOURCE_EXHAUSTED, before allocating, when the pixels would exceed 2 GiB.
// CMYK JPEGs are converted to RGB / gray. 16-bit PNGs keep the high byte, as OpenCV does.
absl::StatusOr<Image> DecodeImage(absl::string_view bytes, int channels = 3);

// INVALID_ARGUMENT for an empty image, channels other than 1 or 3, pixels not holding
// height * width * channels bytes, or quality outside [1, 100].
absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality = 90);
absl::StatusOr<std::string> EncodePng(const Image& image);

}  // namespace tessera::io

#endif  // TESSERA_IO_IMAGE_CODEC_H_

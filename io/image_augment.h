// Image augmentation steps of MXNet's ImageRecordIter (src/io/image_aug_default.cc) on
// 8-bit HWC images (io/image_codec.h). Each is a pure function; randomness is the caller's
// (ImageRecordIter draws crop offsets and mirror flags from a per-sample generator).
// Preconditions (TESSERA_CHECK, aborting): images have 1 or 3 channels, and Resize and
// ResizeShorter take a non-empty image.
#ifndef TESSERA_IO_IMAGE_AUGMENT_H_
#define TESSERA_IO_IMAGE_AUGMENT_H_

#include <array>

#include "io/image_codec.h"

namespace tessera::io {

// Bilinear resize to height x width (both > 0), sampling at pixel centres as OpenCV's
// INTER_LINEAR does.
Image Resize(const Image& image, int height, int width);
// Resize so the shorter side is `shorter`, keeping the aspect ratio (MXNet's `resize`,
// whose integer division truncates the longer side).
Image ResizeShorter(const Image& image, int shorter);
// The height x width window at (y, x); the window must lie inside the image.
Image Crop(const Image& image, int y, int x, int height, int width);

// Writes the image as float CHW into out[channels * height * width]:
// (pixel - mean[c]) * scale / std[c], columns reversed when `mirror`.
void ToCHW(const Image& image, bool mirror, const std::array<float, 3>& mean,
           const std::array<float, 3>& std, float scale, float* out);

}  // namespace tessera::io

#endif  // TESSERA_IO_IMAGE_AUGMENT_H_

#include "io/image_augment.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace tessera::io {
namespace {

// One output coordinate's two source neighbours and the weight of the second.
struct Tap {
  int lo, hi;
  float weight;
};

// OpenCV INTER_LINEAR's pixel-centre mapping: output pixel d samples the source at
// (d + 0.5) * src / dst - 0.5, clamped to the edge pixels.
Tap SourceTap(int d, int src_size, int dst_size) {
  const double scale = static_cast<double>(src_size) / dst_size;
  const double s = std::clamp((d + 0.5) * scale - 0.5, 0.0, static_cast<double>(src_size - 1));
  const int lo = static_cast<int>(s);
  return {lo, std::min(lo + 1, src_size - 1), static_cast<float>(s - lo)};
}

template <int kChannels>
void ResizeRows(const Image& in, Image* out) {
  // Columns repeat for every row, so their taps are computed once, as element offsets.
  struct ColumnTap {
    size_t lo, hi;
    float weight;
  };
  std::vector<ColumnTap> columns(out->width);
  for (int x = 0; x < out->width; ++x) {
    const Tap t = SourceTap(x, in.width, out->width);
    columns[x] = {static_cast<size_t>(t.lo) * kChannels, static_cast<size_t>(t.hi) * kChannels,
                  t.weight};
  }
  const size_t in_stride = static_cast<size_t>(in.width) * kChannels;
  uint8_t* dst = out->pixels.data();
  for (int y = 0; y < out->height; ++y) {
    const Tap row = SourceTap(y, in.height, out->height);
    const uint8_t* top = in.pixels.data() + row.lo * in_stride;
    const uint8_t* bottom = in.pixels.data() + row.hi * in_stride;
    for (const ColumnTap& col : columns) {
      for (int c = 0; c < kChannels; ++c) {
        const float t = top[col.lo + c] + col.weight * (top[col.hi + c] - top[col.lo + c]);
        const float b = bottom[col.lo + c] + col.weight * (bottom[col.hi + c] - bottom[col.lo + c]);
        // A convex combination of bytes stays within [0, 255]; + 0.5 rounds to nearest.
        *dst++ = static_cast<uint8_t>(t + row.weight * (b - t) + 0.5f);
      }
    }
  }
}

template <int kChannels>
void ToCHWPlanes(const Image& image, bool mirror, const float* mean, const float* factor,
                 float* out) {
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  const ptrdiff_t step = mirror ? -1 : 1;
  const uint8_t* src = image.pixels.data();
  for (int y = 0; y < image.height; ++y) {
    float* dst = out + static_cast<size_t>(y) * image.width + (mirror ? image.width - 1 : 0);
    for (int x = 0; x < image.width; ++x, src += kChannels, dst += step) {
      for (int c = 0; c < kChannels; ++c) dst[c * plane] = (src[c] - mean[c]) * factor[c];
    }
  }
}

}  // namespace

Image Resize(const Image& image, int height, int width) {
  TESSERA_CHECK(height > 0 && width > 0);
  TESSERA_CHECK(image.height > 0 && image.width > 0);
  TESSERA_CHECK(image.channels == 1 || image.channels == 3);
  Image out;
  out.height = height;
  out.width = width;
  out.channels = image.channels;
  out.pixels.resize(static_cast<size_t>(height) * width * image.channels);
  if (image.channels == 1) {
    ResizeRows<1>(image, &out);
  } else {
    ResizeRows<3>(image, &out);
  }
  return out;
}

Image ResizeShorter(const Image& image, int shorter) {
  TESSERA_CHECK(shorter > 0);
  TESSERA_CHECK(image.height > 0 && image.width > 0);
  // MXNet's integer arithmetic (truncating), so the sizes match its ImageRecordIter's.
  const int64_t h = image.height, w = image.width;
  if (h > w) return Resize(image, static_cast<int>(shorter * h / w), shorter);
  return Resize(image, shorter, static_cast<int>(shorter * w / h));
}

Image Crop(const Image& image, int y, int x, int height, int width) {
  TESSERA_CHECK(y >= 0 && x >= 0 && height >= 0 && width >= 0);
  TESSERA_CHECK(y <= image.height - height && x <= image.width - width);
  Image out;
  out.height = height;
  out.width = width;
  out.channels = image.channels;
  out.pixels.resize(static_cast<size_t>(height) * width * image.channels);
  const size_t in_stride = static_cast<size_t>(image.width) * image.channels;
  const size_t out_stride = static_cast<size_t>(width) * image.channels;
  const uint8_t* src =
      image.pixels.data() + y * in_stride + static_cast<size_t>(x) * image.channels;
  for (int r = 0; r < height; ++r) {
    std::memcpy(out.pixels.data() + r * out_stride, src + r * in_stride, out_stride);
  }
  return out;
}

void ToCHW(const Image& image, bool mirror, const std::array<float, 3>& mean,
           const std::array<float, 3>& std, float scale, float* out) {
  TESSERA_CHECK(image.channels == 1 || image.channels == 3);
  // One multiply a value instead of a multiply and a divide.
  const std::array<float, 3> factor = {scale / std[0], scale / std[1], scale / std[2]};
  if (image.channels == 1) {
    ToCHWPlanes<1>(image, mirror, mean.data(), factor.data(), out);
  } else {
    ToCHWPlanes<3>(image, mirror, mean.data(), factor.data(), out);
  }
}

}  // namespace tessera::io

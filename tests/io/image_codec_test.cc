// Tests io/image_codec (DecodeImage, EncodeJpeg, EncodePng) and io/image_augment (Resize,
// ResizeShorter, Crop, ToCHW). Files the codec cannot write (CMYK JPEG, RGBA / palette /
// 16-bit PNG) are written here with libjpeg and libpng's simplified API.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

// jpeglib.h uses FILE and size_t without including their header.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
#include <png.h>
// clang-format on

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/image_augment.h"
#include "io/image_codec.h"

namespace tessera::io {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

Image MakeImage(int height, int width, int channels, const std::function<int(int, int, int)>& f) {
  Image image;
  image.height = height;
  image.width = width;
  image.channels = channels;
  image.pixels.resize(static_cast<size_t>(height) * width * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) image.at(y, x, c) = static_cast<uint8_t>(f(y, x, c));
    }
  }
  return image;
}

// Every byte different from its neighbours, so a swapped row, column or channel shows.
Image Pattern(int height, int width, int channels) {
  return MakeImage(height, width, channels,
                   [](int y, int x, int c) { return (y * 37 + x * 11 + c * 101) % 256; });
}

// Smooth, so JPEG's error stays small.
Image Gradient(int height, int width, int channels) {
  return MakeImage(height, width, channels, [](int y, int x, int c) {
    switch (c) {
      case 0:
        return 2 * x + y;
      case 1:
        return 220 - 3 * y;
      default:
        return 128 + x - y;
    }
  });
}

double MeanAbsError(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(a.pixels[i] - b.pixels[i]);
  return sum / a.pixels.size();
}

int Luma(int r, int g, int b) {
  return static_cast<int>(std::lround(0.299 * r + 0.587 * g + 0.114 * b));
}

std::string Encoded(const absl::StatusOr<std::string>& bytes) {
  EXPECT_THAT(bytes, IsOk());
  return bytes.ok() ? *bytes : std::string();
}

// A CMYK JPEG as Photoshop writes it: Adobe marker, inks stored inverted (255 = none).
std::string CmykJpeg(int height, int width, std::array<uint8_t, 4> stored) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);  // YCCK with an Adobe marker
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(width * 4);
  for (int x = 0; x < width; ++x) std::copy(stored.begin(), stored.end(), &row[x * 4]);
  JSAMPROW rows[1] = {row.data()};
  while (cinfo.next_scanline < cinfo.image_height) jpeg_write_scanlines(&cinfo, rows, 1);
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

// A PNG in any of libpng's simplified-API formats (alpha, palette, 16-bit).
std::string SimplePng(uint32_t format, int height, int width, const void* pixels,
                      const void* colormap = nullptr, int colormap_entries = 0) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  image.colormap_entries = colormap_entries;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, colormap));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, colormap))
      << image.message;
  out.resize(size);
  return out;
}

// Offset of the first 0xFF `marker` pair in a JPEG.
size_t FindJpegMarker(const std::string& jpeg, uint8_t marker) {
  for (size_t i = 2; i + 1 < jpeg.size(); ++i) {
    if (jpeg[i] == '\xFF' && static_cast<uint8_t>(jpeg[i + 1]) == marker) return i;
  }
  ADD_FAILURE() << "no marker 0x" << std::hex << int{marker};
  return 0;
}

// PNG's CRC-32 (ISO 3309), bit by bit: the tests only patch one chunk.
uint32_t Crc32(const char* data, size_t size) {
  uint32_t crc = 0xFFFFFFFF;
  for (size_t i = 0; i < size; ++i) {
    crc ^= static_cast<uint8_t>(data[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320 & (0u - (crc & 1)));
  }
  return ~crc;
}

void PutBigEndian32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (24 - 8 * i));
}

// ---------------------------------------------------------------------------------------
// PNG

TEST(PngTest, RoundTripIsExact) {
  for (int channels : {1, 3}) {
    for (auto [h, w] : {std::pair{5, 7}, std::pair{1, 1}, std::pair{64, 33}}) {
      SCOPED_TRACE(::testing::Message() << h << "x" << w << "x" << channels);
      const Image image = Pattern(h, w, channels);
      const std::string png = Encoded(EncodePng(image));
      for (int want : {0, channels}) {
        absl::StatusOr<Image> decoded = DecodeImage(png, want);
        ASSERT_THAT(decoded, IsOk());
        EXPECT_EQ(decoded->height, h);
        EXPECT_EQ(decoded->width, w);
        EXPECT_EQ(decoded->channels, channels);
        EXPECT_EQ(decoded->pixels, image.pixels);
      }
    }
  }
}

TEST(PngTest, GrayDecodedAsRgbIsReplicated) {
  const Image gray = Pattern(5, 7, 1);
  absl::StatusOr<Image> rgb = DecodeImage(Encoded(EncodePng(gray)), 3);
  ASSERT_THAT(rgb, IsOk());
  ASSERT_EQ(rgb->channels, 3);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb->at(y, x, c), gray.at(y, x, 0));
    }
  }
}

TEST(PngTest, RgbDecodedAsGrayIsLuma) {
  const std::vector<std::array<int, 3>> colors = {{255, 0, 0},     {0, 255, 0}, {0, 0, 255},
                                                  {255, 255, 255}, {0, 0, 0},   {30, 140, 220}};
  const Image rgb = MakeImage(1, colors.size(), 3, [&](int, int x, int c) { return colors[x][c]; });
  absl::StatusOr<Image> gray = DecodeImage(Encoded(EncodePng(rgb)), 1);
  ASSERT_THAT(gray, IsOk());
  ASSERT_EQ(gray->channels, 1);
  for (size_t x = 0; x < colors.size(); ++x) {
    EXPECT_NEAR(gray->at(0, x, 0), Luma(colors[x][0], colors[x][1], colors[x][2]), 1) << x;
  }
}

TEST(PngTest, AlphaIsDropped) {
  // RGBA: the colour channels come back untouched, whatever the alpha.
  const std::vector<uint8_t> rgba = {10, 20, 30, 0, 40, 50, 60, 128, 70, 80, 90, 255, 1, 2, 3, 7};
  const std::string png = SimplePng(PNG_FORMAT_RGBA, 2, 2, rgba.data());
  absl::StatusOr<Image> rgb = DecodeImage(png, 0);
  ASSERT_THAT(rgb, IsOk());
  EXPECT_EQ(rgb->channels, 3);
  EXPECT_THAT(rgb->pixels, ElementsAre(10, 20, 30, 40, 50, 60, 70, 80, 90, 1, 2, 3));

  const std::vector<uint8_t> gray_alpha = {10, 0, 200, 255, 77, 1};
  absl::StatusOr<Image> gray = DecodeImage(SimplePng(PNG_FORMAT_GA, 1, 3, gray_alpha.data()), 0);
  ASSERT_THAT(gray, IsOk());
  EXPECT_EQ(gray->channels, 1);
  EXPECT_THAT(gray->pixels, ElementsAre(10, 200, 77));
}

TEST(PngTest, PaletteIsExpanded) {
  const std::vector<uint8_t> colormap = {255, 0, 0, 0, 128, 0, 1, 2, 3};
  const std::vector<uint8_t> indices = {0, 1, 2, 2, 1, 0};
  const std::string png =
      SimplePng(PNG_FORMAT_RGB_COLORMAP, 2, 3, indices.data(), colormap.data(), 3);
  absl::StatusOr<Image> rgb = DecodeImage(png, 0);
  ASSERT_THAT(rgb, IsOk());
  EXPECT_EQ(rgb->channels, 3);
  EXPECT_THAT(rgb->pixels, ElementsAre(255, 0, 0, 0, 128, 0, 1, 2, 3,  //
                                       1, 2, 3, 0, 128, 0, 255, 0, 0));
}

TEST(PngTest, SixteenBitKeepsTheHighByte) {
  const std::vector<uint16_t> gray16 = {0x1234, 0xFFFF, 0x80FF, 0x00FF};
  absl::StatusOr<Image> gray = DecodeImage(SimplePng(PNG_FORMAT_LINEAR_Y, 2, 2, gray16.data()), 0);
  ASSERT_THAT(gray, IsOk());
  EXPECT_EQ(gray->channels, 1);
  EXPECT_THAT(gray->pixels, ElementsAre(0x12, 0xFF, 0x80, 0x00));
}

TEST(PngTest, TruncatedIsDataLoss) {
  const std::string png = Encoded(EncodePng(Pattern(40, 30, 3)));
  for (size_t size : {png.size() / 2, png.size() - 1, size_t{8}, size_t{20}}) {
    EXPECT_THAT(DecodeImage(png.substr(0, size)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt PNG")))
        << size;
  }
}

TEST(PngTest, CorruptChunksAreDataLoss) {
  const std::string png = Encoded(EncodePng(Pattern(40, 30, 3)));
  std::string bad_crc = png;
  bad_crc[29] ^= 0x5A;  // IHDR's CRC: 8 signature + 4 length + 4 type + 13 data
  EXPECT_THAT(DecodeImage(bad_crc), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("CRC")));

  std::string zero_width = png;
  std::memset(&zero_width[16], 0, 4);
  EXPECT_THAT(DecodeImage(zero_width), StatusIs(absl::StatusCode::kDataLoss));

  std::string bad_idat = png;
  const size_t idat = bad_idat.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  bad_idat[idat + 10] ^= 0x5A;
  EXPECT_THAT(DecodeImage(bad_idat), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PngTest, HugeDimensionsAreRefusedBeforeAllocating) {
  std::string png = Encoded(EncodePng(Pattern(4, 4, 3)));
  PutBigEndian32(60000, &png[16]);
  PutBigEndian32(60000, &png[20]);
  PutBigEndian32(Crc32(&png[12], 17), &png[29]);  // over type and data
  EXPECT_THAT(DecodeImage(png),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("60000x60000")));
}

// ---------------------------------------------------------------------------------------
// JPEG

TEST(JpegTest, RoundTripIsClose) {
  for (int channels : {1, 3}) {
    SCOPED_TRACE(channels);
    const Image image = Gradient(32, 48, channels);
    const std::string jpeg = Encoded(EncodeJpeg(image, 95));
    absl::StatusOr<Image> decoded = DecodeImage(jpeg, 0);
    ASSERT_THAT(decoded, IsOk());
    EXPECT_EQ(decoded->height, 32);
    EXPECT_EQ(decoded->width, 48);
    EXPECT_EQ(decoded->channels, channels);
    EXPECT_LT(MeanAbsError(*decoded, image), 3.0);
  }
}

TEST(JpegTest, OddSizeRoundTrip) {
  const Image image = Gradient(5, 7, 3);
  absl::StatusOr<Image> decoded = DecodeImage(Encoded(EncodeJpeg(image, 100)), 3);
  ASSERT_THAT(decoded, IsOk());
  EXPECT_EQ(decoded->height, 5);
  EXPECT_EQ(decoded->width, 7);
  EXPECT_LT(MeanAbsError(*decoded, image), 3.0);
}

TEST(JpegTest, ChannelConversions) {
  const Image gray = Gradient(16, 16, 1);
  absl::StatusOr<Image> replicated = DecodeImage(Encoded(EncodeJpeg(gray, 95)), 3);
  ASSERT_THAT(replicated, IsOk());
  ASSERT_EQ(replicated->channels, 3);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      EXPECT_EQ(replicated->at(y, x, 1), replicated->at(y, x, 0));
      EXPECT_EQ(replicated->at(y, x, 2), replicated->at(y, x, 0));
      EXPECT_NEAR(replicated->at(y, x, 0), gray.at(y, x, 0), 4);
    }
  }

  const Image rgb = Gradient(16, 16, 3);
  absl::StatusOr<Image> luma = DecodeImage(Encoded(EncodeJpeg(rgb, 95)), 1);
  ASSERT_THAT(luma, IsOk());
  ASSERT_EQ(luma->channels, 1);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      EXPECT_NEAR(luma->at(y, x, 0), Luma(rgb.at(y, x, 0), rgb.at(y, x, 1), rgb.at(y, x, 2)), 4);
    }
  }
}

TEST(JpegTest, CmykIsConvertedToRgb) {
  struct Case {
    std::array<uint8_t, 4> stored;  // inverted inks
    std::array<int, 3> rgb;
  };
  for (const Case& t : {Case{{255, 0, 0, 255}, {255, 0, 0}},          // magenta + yellow
                        Case{{255, 255, 255, 128}, {128, 128, 128}},  // half black
                        Case{{0, 255, 255, 255}, {0, 255, 255}}}) {   // cyan
    const std::string jpeg = CmykJpeg(16, 16, t.stored);
    absl::StatusOr<Image> rgb = DecodeImage(jpeg, 0);
    ASSERT_THAT(rgb, IsOk());
    ASSERT_EQ(rgb->channels, 3);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(rgb->at(8, 8, c), t.rgb[c], 3) << c;
    absl::StatusOr<Image> gray = DecodeImage(jpeg, 1);
    ASSERT_THAT(gray, IsOk());
    ASSERT_EQ(gray->channels, 1);
    EXPECT_NEAR(gray->at(8, 8, 0), Luma(t.rgb[0], t.rgb[1], t.rgb[2]), 3);
  }
}

TEST(JpegTest, TruncatedIsDataLoss) {
  const std::string jpeg = Encoded(EncodeJpeg(Pattern(64, 64, 3), 90));
  for (size_t size : {jpeg.size() / 2, jpeg.size() - 2, size_t{3}, size_t{100}}) {
    EXPECT_THAT(DecodeImage(jpeg.substr(0, size)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt JPEG")))
        << size;
  }
}

TEST(JpegTest, CorruptHeaderIsDataLoss) {
  const std::string jpeg = Encoded(EncodeJpeg(Gradient(32, 32, 3), 90));
  const size_t sof = FindJpegMarker(jpeg, 0xC0);
  const size_t dht = FindJpegMarker(jpeg, 0xC4);

  std::string precision = jpeg;
  precision[sof + 4] = 3;
  EXPECT_THAT(DecodeImage(precision),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("precision")));

  std::string sof_length = jpeg;
  sof_length[sof + 2] = sof_length[sof + 3] = 0;
  EXPECT_THAT(DecodeImage(sof_length), StatusIs(absl::StatusCode::kDataLoss));

  std::string huffman = jpeg;
  std::memset(&huffman[dht + 5], 0xFF, 16);  // code counts summing past 256
  EXPECT_THAT(DecodeImage(huffman), StatusIs(absl::StatusCode::kDataLoss));

  // Garbage between markers, which libjpeg skips with only a warning.
  std::string garbage = jpeg;
  garbage.insert(dht, "\x12\x34\x56");
  EXPECT_THAT(DecodeImage(garbage),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("extraneous bytes")));
}

TEST(JpegTest, HugeDimensionsAreRefusedBeforeAllocating) {
  std::string jpeg = Encoded(EncodeJpeg(Gradient(8, 8, 3), 90));
  const size_t sof = FindJpegMarker(jpeg, 0xC0);
  for (size_t i : {sof + 5, sof + 7}) jpeg[i] = '\xFD', jpeg[i + 1] = '\xE8';  // 65000
  EXPECT_THAT(DecodeImage(jpeg),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("65000x65000")));
}

// ---------------------------------------------------------------------------------------
// Argument errors

TEST(ImageCodecTest, UnknownFormatIsInvalidArgument) {
  EXPECT_THAT(DecodeImage(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("neither JPEG nor PNG")));
  std::mt19937 rng(7);
  std::string noise(1000, '\0');
  for (char& b : noise) b = static_cast<char>(rng());
  noise[0] = 0;  // not 0xFF or 0x89, whatever the generator gives
  EXPECT_THAT(DecodeImage(noise), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DecodeImage("GIF89a......"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ImageCodecTest, BadChannelsIsInvalidArgument) {
  const std::string png = Encoded(EncodePng(Pattern(2, 2, 3)));
  for (int channels : {-1, 2, 4}) {
    EXPECT_THAT(DecodeImage(png, channels),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("channels")));
  }
}

TEST(ImageCodecTest, BadImagesAreNotEncoded) {
  const Image empty;
  EXPECT_THAT(EncodePng(empty), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(EncodeJpeg(empty), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));

  const Image two_channels = Pattern(2, 2, 2);
  EXPECT_THAT(EncodePng(two_channels), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EncodeJpeg(two_channels), StatusIs(absl::StatusCode::kInvalidArgument));

  Image short_pixels = Pattern(2, 2, 3);
  short_pixels.pixels.pop_back();
  EXPECT_THAT(EncodePng(short_pixels), StatusIs(absl::StatusCode::kInvalidArgument));

  for (int quality : {0, 101}) {
    EXPECT_THAT(EncodeJpeg(Pattern(2, 2, 3), quality),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("quality")));
  }
}

// ---------------------------------------------------------------------------------------
// Augmentation

// The reference: OpenCV INTER_LINEAR's formula written out per pixel, in double.
Image ReferenceResize(const Image& in, int height, int width) {
  Image out = MakeImage(height, width, in.channels, [](int, int, int) { return 0; });
  const auto source = [](int d, int src, int dst) {
    return std::clamp((d + 0.5) * src / dst - 0.5, 0.0, src - 1.0);
  };
  for (int y = 0; y < height; ++y) {
    const double sy = source(y, in.height, height);
    const int y0 = static_cast<int>(sy), y1 = std::min(y0 + 1, in.height - 1);
    for (int x = 0; x < width; ++x) {
      const double sx = source(x, in.width, width);
      const int x0 = static_cast<int>(sx), x1 = std::min(x0 + 1, in.width - 1);
      const double fy = sy - y0, fx = sx - x0;
      for (int c = 0; c < in.channels; ++c) {
        const double v = (1 - fy) * ((1 - fx) * in.at(y0, x0, c) + fx * in.at(y0, x1, c)) +
                         fy * ((1 - fx) * in.at(y1, x0, c) + fx * in.at(y1, x1, c));
        out.at(y, x, c) = static_cast<uint8_t>(std::lround(v));
      }
    }
  }
  return out;
}

TEST(ResizeTest, SameSizeIsIdentity) {
  for (int channels : {1, 3}) {
    const Image image = Pattern(5, 7, channels);
    EXPECT_EQ(Resize(image, 5, 7).pixels, image.pixels);
  }
}

TEST(ResizeTest, HalvingAveragesTwoByTwoBlocks) {
  const std::vector<int> values = {0,   4,   100, 110,  //
                                   8,   12,  120, 130,  //
                                   200, 210, 1,   3,    //
                                   220, 230, 5,   7};
  const Image gray = MakeImage(4, 4, 1, [&](int y, int x, int) { return values[y * 4 + x]; });
  const Image half = Resize(gray, 2, 2);
  EXPECT_EQ(half.channels, 1);
  EXPECT_THAT(half.pixels, ElementsAre(6, 115, 215, 4));

  const Image rgb = MakeImage(4, 4, 3, [&](int y, int x, int c) {
    const int v = values[y * 4 + x];
    return c == 0 ? v : c == 1 ? 255 - v : 9;
  });
  EXPECT_THAT(Resize(rgb, 2, 2).pixels, ElementsAre(6, 249, 9, 115, 140, 9, 215, 40, 9, 4, 251, 9));
}

TEST(ResizeTest, DoublingInterpolatesAtPixelCentres) {
  // Output pixel d samples source coordinate (d + 0.5) / 2 - 0.5: -0.25 (clamped to 0),
  // 0.25, 0.75, 1.25 (clamped to 1).
  const Image image =
      MakeImage(2, 2, 1, [](int y, int x, int) { return y == 0 ? x * 100 : 200 - x * 160; });
  const Image up = Resize(image, 4, 4);
  EXPECT_EQ(up.at(0, 0, 0), 0);
  EXPECT_EQ(up.at(0, 1, 0), 25);
  EXPECT_EQ(up.at(0, 2, 0), 75);
  EXPECT_EQ(up.at(0, 3, 0), 100);
  EXPECT_EQ(up.at(1, 0, 0), 50);
  EXPECT_EQ(up.at(1, 1, 0), 59);  // 25 + 0.25 * (160 - 25) = 58.75
  EXPECT_EQ(up.at(2, 2, 0), 79);  // 75 + 0.75 * (80 - 75) = 78.75
  EXPECT_EQ(up.at(3, 0, 0), 200);
  EXPECT_EQ(up.at(3, 3, 0), 40);
}

TEST(ResizeTest, MatchesReferenceWithinRounding) {
  const Image image = Pattern(13, 9, 3);
  for (auto [h, w] : {std::pair{7, 20}, std::pair{5, 4}, std::pair{26, 9}, std::pair{1, 1}}) {
    SCOPED_TRACE(::testing::Message() << h << "x" << w);
    const Image got = Resize(image, h, w);
    const Image want = ReferenceResize(image, h, w);
    ASSERT_EQ(got.pixels.size(), want.pixels.size());
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      EXPECT_NEAR(got.pixels[i], want.pixels[i], 1) << i;
    }
  }
}

TEST(ResizeTest, ResizeShorterKeepsAspectRatio) {
  const auto size = [](int h, int w, int shorter) {
    const Image r = ResizeShorter(Pattern(h, w, 3), shorter);
    return std::pair{r.height, r.width};
  };
  EXPECT_EQ(size(20, 40, 10), (std::pair{10, 20}));
  EXPECT_EQ(size(40, 20, 10), (std::pair{20, 10}));
  EXPECT_EQ(size(30, 30, 12), (std::pair{12, 12}));
  EXPECT_EQ(size(7, 10, 5), (std::pair{5, 7}));  // 5 * 10 / 7 truncates, as in MXNet
}

TEST(CropTest, PicksTheWindow) {
  const Image image = Pattern(5, 6, 3);
  const Image crop = Crop(image, 1, 2, 3, 4);
  ASSERT_EQ(crop.height, 3);
  ASSERT_EQ(crop.width, 4);
  ASSERT_EQ(crop.channels, 3);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 4; ++x) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(crop.at(y, x, c), image.at(y + 1, x + 2, c));
    }
  }
  EXPECT_EQ(Crop(image, 0, 0, 5, 6).pixels, image.pixels);
}

TEST(CropDeathTest, WindowOutsideTheImageAborts) {
  const Image image = Pattern(5, 6, 1);
  EXPECT_DEATH(Crop(image, 3, 0, 3, 1), "check failed");
  EXPECT_DEATH(Crop(image, 0, -1, 1, 1), "check failed");
}

TEST(ToCHWTest, RgbWithMeanStdScaleAndMirror) {
  // 2x3 RGB, pixel (y, x) = (v, v + 1, v + 2) with v = 10 * (3y + x).
  const Image image = MakeImage(2, 3, 3, [](int y, int x, int c) { return 10 * (3 * y + x) + c; });
  const std::array<float, 3> mean = {1, 2, 3}, std = {2, 4, 0.5};
  // (p - mean) * 0.5 / std: channel 0 (p - 1) / 4, channel 1 (p - 2) / 8, channel 2 p - 3.
  const std::vector<float> want = {-0.25,  2.25,  4.75,  7.25,  9.75,  12.25,  //
                                   -0.125, 1.125, 2.375, 3.625, 4.875, 6.125,  //
                                   -1,     9,     19,    29,    39,    49};
  const std::vector<float> want_mirrored = {4.75,  2.25,  -0.25,  12.25, 9.75,  7.25,   //
                                            2.375, 1.125, -0.125, 6.125, 4.875, 3.625,  //
                                            19,    9,     -1,     49,    39,    29};
  std::vector<float> out(18);
  ToCHW(image, false, mean, std, 0.5f, out.data());
  EXPECT_THAT(out, Pointwise(FloatNear(1e-5), want));
  ToCHW(image, true, mean, std, 0.5f, out.data());
  EXPECT_THAT(out, Pointwise(FloatNear(1e-5), want_mirrored));
}

TEST(ToCHWTest, GrayUsesTheFirstMeanAndStd) {
  const Image image = MakeImage(2, 3, 1, [](int y, int x, int) { return 10 * (3 * y + x); });
  const std::array<float, 3> mean = {5, 100, 100}, std = {5, 0.01f, 0.01f};
  std::vector<float> out(6);
  ToCHW(image, false, mean, std, 1.0f, out.data());
  EXPECT_THAT(out, Pointwise(FloatNear(1e-5), std::vector<float>{-1, 1, 3, 5, 7, 9}));
  ToCHW(image, true, mean, std, 1.0f, out.data());
  EXPECT_THAT(out, Pointwise(FloatNear(1e-5), std::vector<float>{3, 1, -1, 9, 7, 5}));
}

}  // namespace
}  // namespace tessera::io

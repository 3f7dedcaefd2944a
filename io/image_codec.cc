#include "io/image_codec.h"

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// jpeglib.h uses FILE and size_t without including their header.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
#include <png.h>
// clang-format on

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera::io {
namespace {

// A corrupt header can claim any size; refuse to allocate more than this for the pixels.
constexpr uint64_t kMaxPixelBytes = uint64_t{1} << 31;

bool IsJpeg(absl::string_view bytes) {
  return bytes.size() >= 3 && bytes[0] == '\xFF' && bytes[1] == '\xD8' && bytes[2] == '\xFF';
}

bool IsPng(absl::string_view bytes) {
  return bytes.size() >= 8 &&
         png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) == 0;
}

// Dimensions come from the file: PNG allows up to 2^31 - 1 a side, so height * width fits
// in 64 bits but height * width * channels might not.
absl::Status CheckDecodeSize(absl::string_view format, uint64_t height, uint64_t width,
                             int channels) {
  if (height * width > kMaxPixelBytes / channels) {
    return absl::ResourceExhaustedError(absl::StrCat(format, " image of ", width, "x", height, "x",
                                                     channels, " exceeds the 2 GiB decode limit"));
  }
  return absl::OkStatus();
}

absl::Status CheckEncodable(absl::string_view what, const Image& image) {
  if (image.height <= 0 || image.width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": empty image (", image.width, "x", image.height, ")"));
  }
  if (image.channels != 1 && image.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": channels must be 1 or 3, got ", image.channels));
  }
  const size_t want = static_cast<size_t>(image.height) * image.width * image.channels;
  if (image.pixels.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", image.width, "x", image.height, "x",
                                                   image.channels, " image holds ",
                                                   image.pixels.size(), " bytes, want ", want));
  }
  return absl::OkStatus();
}

// Gray from RGB with the BT.601 weights libjpeg and OpenCV use.
uint8_t Luma(int r, int g, int b) {
  return static_cast<uint8_t>((r * 299 + g * 587 + b * 114 + 500) / 1000);
}

// ---------------------------------------------------------------------------------------
// JPEG

// libjpeg's error manager plus where to jump on failure and the failure's text.
struct JpegErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg hands back a pointer to it as cinfo->err
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

// Replaces libjpeg's default, which prints and calls exit().
[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg reports corrupt data it can limp past (premature end of data, garbage before a
// marker) as a warning (level -1) and pads the image with grey; we would rather fail than
// train on that. Levels >= 0 are trace messages.
void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) JpegErrorExit(cinfo);
}

jpeg_error_mgr* InstallJpegErrors(JpegErrorManager* err) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = JpegErrorExit;
  err->pub.emit_message = JpegEmitMessage;
  return &err->pub;
}

// Runs `steps` (libjpeg calls) with the jump target in this frame; false if libjpeg failed.
// A longjmp must skip no destructor, so this frame holds only a reference to `steps`, and
// `steps` may capture only pointers/references and create nothing with a destructor.
template <typename Steps>
bool RunJpeg(JpegErrorManager* err, const Steps& steps) {
  if (setjmp(err->jump) != 0) return false;
  steps();
  return true;
}

struct JpegDecompressor {
  jpeg_decompress_struct cinfo{};  // zeroed, so destroying it before create is a no-op
  JpegErrorManager err{};

  JpegDecompressor() { cinfo.err = InstallJpegErrors(&err); }
  ~JpegDecompressor() { jpeg_destroy_decompress(&cinfo); }
};

struct JpegCompressor {
  jpeg_compress_struct cinfo{};
  JpegErrorManager err{};
  unsigned char* buffer = nullptr;  // malloc'ed by jpeg_mem_dest, ours to free
  unsigned long size = 0;

  JpegCompressor() { cinfo.err = InstallJpegErrors(&err); }
  ~JpegCompressor() {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
  }
};

// libjpeg cannot convert CMYK to RGB, so CMYK files are decoded as CMYK and converted here.
// Adobe (whose marker such files carry) stores the inks inverted: 255 = no ink.
void CmykToImage(const uint8_t* cmyk, bool inverted, Image* image) {
  uint8_t* out = image->pixels.data();
  const size_t n = static_cast<size_t>(image->height) * image->width;
  for (size_t i = 0; i < n; ++i, cmyk += 4) {
    int c = cmyk[0], m = cmyk[1], y = cmyk[2], k = cmyk[3];
    if (!inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    const int r = (c * k + 127) / 255, g = (m * k + 127) / 255, b = (y * k + 127) / 255;
    if (image->channels == 1) {
      *out++ = Luma(r, g, b);
    } else {
      *out++ = r, *out++ = g, *out++ = b;
    }
  }
}

absl::StatusOr<Image> DecodeJpeg(absl::string_view bytes, int channels) {
  JpegDecompressor d;
  j_decompress_ptr cinfo = &d.cinfo;
  const auto corrupt = [&d] {
    return absl::DataLossError(absl::StrCat("corrupt JPEG: ", d.err.message));
  };
  if (!RunJpeg(&d.err, [&] {
        jpeg_create_decompress(cinfo);
        jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
        jpeg_read_header(cinfo, TRUE);
      })) {
    return corrupt();
  }
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  if (channels == 0) channels = cinfo->jpeg_color_space == JCS_GRAYSCALE ? 1 : 3;
  cinfo->out_color_space = cmyk ? JCS_CMYK : channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  const int decoded_channels = cmyk ? 4 : channels;
  // Before jpeg_start_decompress, which allocates whole-image buffers for progressive files.
  RETURN_IF_ERROR(
      CheckDecodeSize("JPEG", cinfo->image_height, cinfo->image_width, decoded_channels));
  // libjpeg's own buffers (a progressive file's coefficients take 2 bytes a sample, zeroed
  // up front) stay under the same limit: beyond it libjpeg fails for want of a backing store.
  cinfo->mem->max_memory_to_use = kMaxPixelBytes;
  if (!RunJpeg(&d.err, [&] { jpeg_start_decompress(cinfo); })) return corrupt();

  Image image;
  image.height = static_cast<int>(cinfo->output_height);
  image.width = static_cast<int>(cinfo->output_width);
  image.channels = channels;
  std::vector<uint8_t> cmyk_pixels;
  std::vector<uint8_t>& out = cmyk ? cmyk_pixels : image.pixels;
  const size_t stride = static_cast<size_t>(image.width) * cinfo->output_components;
  // Rows are zeroed as they are decoded, not all up front: a truncated file whose header
  // claims 2 GiB of pixels then touches only the rows its bytes reach (reserve only maps
  // memory), instead of 2 GiB before failing. Reserved, so `out` never moves.
  out.reserve(static_cast<size_t>(image.height) * stride);
  if (!RunJpeg(&d.err, [&] {
        while (cinfo->output_scanline < cinfo->output_height) {
          out.resize((cinfo->output_scanline + size_t{1}) * stride);
          JSAMPROW row = out.data() + cinfo->output_scanline * stride;
          jpeg_read_scanlines(cinfo, &row, 1);
        }
        // Reads up to EOI, so corruption after the last scanline is caught too.
        jpeg_finish_decompress(cinfo);
      })) {
    return corrupt();
  }
  if (cmyk) {
    image.pixels.resize(static_cast<size_t>(image.height) * image.width * channels);
    CmykToImage(cmyk_pixels.data(), cinfo->saw_Adobe_marker, &image);
  }
  return image;
}

// ---------------------------------------------------------------------------------------
// PNG

struct PngMessage {
  char text[256];
};

// Replaces libpng's default, which prints to stderr before jumping.
[[noreturn]] void PngError(png_structp png, png_const_charp message) {
  auto* m = static_cast<PngMessage*>(png_get_error_ptr(png));
  std::snprintf(m->text, sizeof m->text, "%s", message);
  png_longjmp(png, 1);
}

// Warnings (a bad ancillary chunk, an odd colour profile) leave the pixels intact.
void PngWarning(png_structp, png_const_charp) {}

struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t offset;
};

void PngRead(png_structp png, png_bytep out, png_size_t length) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (in->size - in->offset < length) png_error(png, "unexpected end of data");
  std::memcpy(out, in->data + in->offset, length);
  in->offset += length;
}

void PngWrite(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))
      ->append(reinterpret_cast<const char*>(data), length);
}

// libpng's default flush would fflush() the io pointer as if it were a FILE*.
void PngFlush(png_structp) {}

// As RunJpeg, with libpng's jump buffer.
template <typename Steps>
bool RunPng(png_structp png, const Steps& steps) {
  if (setjmp(png_jmpbuf(png)) != 0) return false;
  steps();
  return true;
}

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() { png_destroy_read_struct(&png, &info, nullptr); }
};

struct PngWriter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriter() { png_destroy_write_struct(&png, &info); }
};

absl::StatusOr<Image> DecodePng(absl::string_view bytes, int channels) {
  PngMessage message{};
  PngInput in{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
  PngReader r;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &message, PngError, PngWarning);
  if (r.png != nullptr) r.info = png_create_info_struct(r.png);
  if (r.info == nullptr) return absl::ResourceExhaustedError("cannot create a libpng reader");
  const auto corrupt = [&message] {
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", message.text));
  };

  png_uint_32 height = 0, width = 0;
  int decoded_channels = 0, passes = 1;
  size_t row_bytes = 0;
  if (!RunPng(r.png, [&] {
        png_set_read_fn(r.png, &in, PngRead);
        png_read_info(r.png, r.info);
        const bool gray = (png_get_color_type(r.png, r.info) & PNG_COLOR_MASK_COLOR) == 0;
        if (channels == 0) channels = gray ? 1 : 3;
        png_set_expand(r.png);  // palette to RGB, gray below 8 bits to 8
        // Keeps the high byte, as OpenCV's decoder (hence MXNet's) does.
        png_set_strip_16(r.png);
        png_set_strip_alpha(r.png);
        if (gray && channels == 3) png_set_gray_to_rgb(r.png);
        // BT.601 weights (in 1/100000), matching libjpeg's YCbCr luma; 1 = convert silently.
        if (!gray && channels == 1) png_set_rgb_to_gray_fixed(r.png, 1, 29900, 58700);
        passes = png_set_interlace_handling(r.png);
        png_read_update_info(r.png, r.info);
        height = png_get_image_height(r.png, r.info);
        width = png_get_image_width(r.png, r.info);
        decoded_channels = png_get_channels(r.png, r.info);
        row_bytes = png_get_rowbytes(r.png, r.info);
      })) {
    return corrupt();
  }
  if (decoded_channels != channels || row_bytes != static_cast<size_t>(width) * channels) {
    return absl::InternalError(absl::StrCat("libpng decoded ", decoded_channels, " channels and ",
                                            row_bytes, " bytes a row, want ", channels, " and ",
                                            static_cast<size_t>(width) * channels));
  }
  RETURN_IF_ERROR(CheckDecodeSize("PNG", height, width, channels));

  Image image;
  image.height = static_cast<int>(height);
  image.width = static_cast<int>(width);
  image.channels = channels;
  // png_read_image's loop, growing the rows as they are reached (as DecodeJpeg: a truncated
  // file claiming 2 GiB touches only what its bytes decode to). Reserved, so rows never move.
  image.pixels.reserve(static_cast<size_t>(height) * row_bytes);
  if (!RunPng(r.png, [&] {
        for (int pass = 0; pass < passes; ++pass) {
          for (png_uint_32 y = 0; y < height; ++y) {
            const size_t end = (y + size_t{1}) * row_bytes;
            if (image.pixels.size() < end) image.pixels.resize(end);
            png_read_row(r.png, image.pixels.data() + y * row_bytes, nullptr);
          }
        }
        // Checks the remaining chunks' CRCs up to IEND, so a truncated tail is caught too.
        png_read_end(r.png, nullptr);
      })) {
    return corrupt();
  }
  return image;
}

}  // namespace

absl::StatusOr<Image> DecodeImage(absl::string_view bytes, int channels) {
  if (channels != 0 && channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeImage: channels must be 0, 1 or 3, got ", channels));
  }
  if (IsJpeg(bytes)) return DecodeJpeg(bytes, channels);
  if (IsPng(bytes)) return DecodePng(bytes, channels);
  return absl::InvalidArgumentError(absl::StrCat("DecodeImage: neither JPEG nor PNG (",
                                                 bytes.size(), " bytes, starting 0x",
                                                 absl::BytesToHexString(bytes.substr(0, 8)), ")"));
}

absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality) {
  RETURN_IF_ERROR(CheckEncodable("EncodeJpeg", image));
  if (quality < 1 || quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeJpeg: quality must be in [1, 100], got ", quality));
  }
  if (image.height > JPEG_MAX_DIMENSION || image.width > JPEG_MAX_DIMENSION) {
    return absl::InvalidArgumentError(absl::StrCat("EncodeJpeg: ", image.width, "x", image.height,
                                                   " exceeds JPEG's limit of ", JPEG_MAX_DIMENSION,
                                                   " pixels a side"));
  }
  JpegCompressor c;
  j_compress_ptr cinfo = &c.cinfo;
  const size_t stride = static_cast<size_t>(image.width) * image.channels;
  // libjpeg takes non-const rows but only reads them.
  uint8_t* const pixels = const_cast<uint8_t*>(image.pixels.data());
  if (!RunJpeg(&c.err, [&] {
        jpeg_create_compress(cinfo);
        jpeg_mem_dest(cinfo, &c.buffer, &c.size);
        cinfo->image_width = image.width;
        cinfo->image_height = image.height;
        cinfo->input_components = image.channels;
        cinfo->in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
        jpeg_set_defaults(cinfo);
        jpeg_set_quality(cinfo, quality, TRUE);
        jpeg_start_compress(cinfo, TRUE);
        while (cinfo->next_scanline < cinfo->image_height) {
          JSAMPROW row = pixels + cinfo->next_scanline * stride;
          jpeg_write_scanlines(cinfo, &row, 1);
        }
        jpeg_finish_compress(cinfo);
      })) {
    return absl::InternalError(absl::StrCat("EncodeJpeg: libjpeg failed: ", c.err.message));
  }
  return std::string(reinterpret_cast<const char*>(c.buffer), c.size);
}

absl::StatusOr<std::string> EncodePng(const Image& image) {
  RETURN_IF_ERROR(CheckEncodable("EncodePng", image));
  PngMessage message{};
  PngWriter w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &message, PngError, PngWarning);
  if (w.png != nullptr) w.info = png_create_info_struct(w.png);
  if (w.info == nullptr) return absl::ResourceExhaustedError("cannot create a libpng writer");

  const size_t stride = static_cast<size_t>(image.width) * image.channels;
  std::vector<png_bytep> rows(image.height);
  for (int y = 0; y < image.height; ++y) {
    rows[y] = const_cast<png_bytep>(image.pixels.data()) + y * stride;  // read only
  }
  std::string out;
  if (!RunPng(w.png, [&] {
        png_set_write_fn(w.png, &out, PngWrite, PngFlush);
        png_set_IHDR(w.png, w.info, image.width, image.height, 8,
                     image.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(w.png, w.info);
        png_write_image(w.png, rows.data());
        png_write_end(w.png, nullptr);
      })) {
    return absl::InternalError(absl::StrCat("EncodePng: libpng failed: ", message.text));
  }
  return out;
}

}  // namespace tessera::io

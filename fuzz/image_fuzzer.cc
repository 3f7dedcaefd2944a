// Fuzz target: JPEG and PNG decoding (io/image_codec.h) to gray and to RGB. A decoded image
// must hold height * width * channels bytes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz/require.h"
#include "io/image_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT(build/namespaces): a fuzz target's single function
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (int channels : {1, 3}) {
    auto image = io::DecodeImage(bytes, channels);
    if (!image.ok()) continue;
    fuzz::Require(image->channels == channels, "DecodeImage gives the channels asked for");
    fuzz::Require(
        image->pixels.size() == static_cast<size_t>(image->height) * image->width * image->channels,
        "pixels hold height * width * channels bytes");
  }
  return 0;
}

// io_bench: images/s that ImageRecordIter delivers, beside the images/s LeNet training
// consumes, in the same run.
//
// Data: two generated JPEG sets (quality 90, seeded smooth gradients with noise, so the
// files have natural-image entropy), packed into .rec + .idx in a temporary folder:
//   small: --small_images 32x32 images, cropped to (3, 28, 28)
//   large: --large_images 224x224 images, cropped to (3, 196, 196)
// Each runs with rand_crop, rand_mirror and mean/std normalization at batch 128, shuffled,
// prefetching 4 batches, with 1 and 2 decode threads: one warm-up epoch each, then the
// best of three alternating epochs, each timed from the iterator's creation. The trainer figure is LeNet at batch 64 through Module (bench/
// trainer_throughput.h), the figure train_bench reports.
//
// Last line: one JSON object with every figure, <set>_thread_scaling (2 threads over 1) and
// ratio_vs_lenet_trainer (the small set's best images/s over LeNet's samples/s; the small
// set is the heavier input for LeNet: 3 channels instead of its 1). Target: ratio >= 2 and
// scaling with the decode threads.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/trainer_throughput.h"
#include "core/check.h"
#include "examples/models.h"
#include "io/image_codec.h"
#include "io/image_record.h"
#include "io/image_record_iter.h"
#include "io/recordio.h"
#include "ndarray/runtime.h"

ABSL_FLAG(int, small_images, 4096, "32x32 JPEGs to generate (at least one batch, 128)");
ABSL_FLAG(int, large_images, 1024, "224x224 JPEGs to generate (at least one batch, 128)");

namespace tessera {
namespace {

constexpr int kBatch = 128;

// A side x side RGB image: a seeded colour gradient with a few shapes and pixel noise.
io::Image SyntheticImage(std::mt19937& rng, int side) {
  std::uniform_real_distribution<float> u(0, 1);
  std::normal_distribution<float> noise(0, 6);
  const float base[3] = {u(rng) * 255, u(rng) * 255, u(rng) * 255};
  const float gy[3] = {u(rng) - 0.5f, u(rng) - 0.5f, u(rng) - 0.5f};
  const float gx[3] = {u(rng) - 0.5f, u(rng) - 0.5f, u(rng) - 0.5f};
  const float cy = u(rng) * side, cx = u(rng) * side, r = (0.1f + 0.3f * u(rng)) * side;
  io::Image image{side, side, 3, std::vector<uint8_t>(static_cast<size_t>(side) * side * 3)};
  for (int y = 0; y < side; ++y) {
    for (int x = 0; x < side; ++x) {
      const bool disc = (y - cy) * (y - cy) + (x - cx) * (x - cx) < r * r;
      for (int c = 0; c < 3; ++c) {
        float v = base[c] + (gy[c] * y + gx[c] * x) * 255.0f / side + noise(rng);
        if (disc) v = 255 - v;
        image.at(y, x, c) = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return image;
}

// Writes `count` JPEGs of side x side into prefix.rec/.idx; returns the .rec's size.
uint64_t WriteSet(const std::string& prefix, int count, int side) {
  std::mt19937 rng(side);
  auto writer = io::RecordIOWriter::Open(prefix + ".rec");
  TESSERA_CHECK(writer.ok());
  std::vector<io::RecordIndexEntry> index;
  for (int i = 0; i < count; ++i) {
    auto jpeg = io::EncodeJpeg(SyntheticImage(rng, side), 90);
    TESSERA_CHECK(jpeg.ok());
    auto offset = (*writer)->Write(io::PackImageRecord({static_cast<float>(i % 10)}, i, 0, *jpeg));
    TESSERA_CHECK(offset.ok());
    index.push_back({static_cast<uint64_t>(i), *offset});
  }
  TESSERA_CHECK((*writer)->Close().ok());
  TESSERA_CHECK(io::WriteRecordIndex(prefix + ".idx", index).ok());
  return std::filesystem::file_size(prefix + ".rec");
}

std::unique_ptr<io::DataIter> MakeIter(const Runtime& rt, const std::string& prefix, int crop,
                                       int threads) {
  io::ImageRecordIterOptions o;
  o.path_imgrec = prefix + ".rec";
  o.path_imgidx = prefix + ".idx";
  o.data_shape = Shape{3, crop, crop};
  o.batch_size = kBatch;
  o.shuffle = true;
  o.rand_crop = true;
  o.rand_mirror = true;
  o.mean = {123.68f, 116.28f, 103.53f};
  o.std = {58.395f, 57.12f, 57.375f};
  o.preprocess_threads = threads;
  o.prefetch_buffer = 4;
  o.silent = true;
  auto it = io::ImageRecordIter::Create(rt, o);
  TESSERA_CHECK(it.ok());
  return std::move(it).value();
}

// Images/s of one epoch of a new iterator, timed from its creation: the iterator starts
// prefetching when created, so an iterator kept alive between epochs would work ahead
// while another one is timed.
double EpochImagesPerSecond(const Runtime& rt, const std::string& prefix, int crop, int threads) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<io::DataIter> it = MakeIter(rt, prefix, crop, threads);
  int64_t images = 0;
  for (;;) {
    auto more = it->Next();
    TESSERA_CHECK(more.ok());
    if (!*more) break;
    images += it->Value().data[0].shape()[0];
  }
  return images / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best images/s of three epochs with 1 and with 2 decode threads, after a warm-up epoch
// each; the rounds alternate so that the machine's drift hits both alike.
std::pair<double, double> IterImagesPerSecond(const Runtime& rt, const std::string& prefix,
                                              int crop) {
  EpochImagesPerSecond(rt, prefix, crop, 1);  // warm-up: page cache, allocator, thread pool
  EpochImagesPerSecond(rt, prefix, crop, 2);
  double best_one = 0, best_two = 0;
  for (int round = 0; round < 3; ++round) {
    best_one = std::max(best_one, EpochImagesPerSecond(rt, prefix, crop, 1));
    best_two = std::max(best_two, EpochImagesPerSecond(rt, prefix, crop, 2));
  }
  return {best_one, best_two};
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;  // NOLINT(build/namespaces)
  absl::SetProgramUsageMessage("io_bench: ImageRecordIter images/s against LeNet training");
  absl::ParseCommandLine(argc, argv);
  const int small_images = absl::GetFlag(FLAGS_small_images);
  const int large_images = absl::GetFlag(FLAGS_large_images);
  if (small_images < kBatch || large_images < kBatch) {
    std::fprintf(stderr, "io_bench: --small_images and --large_images must be at least %d\n", kBatch);
    return 2;
  }
  auto rt = OwnedRuntime::Create(0);
  TESSERA_CHECK(rt.ok());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("io_bench-", getpid());
  std::filesystem::create_directories(dir);

  struct Set {
    const char* name;
    int count, side, crop;
  };
  const Set sets[] = {{"small", small_images, 32, 28}, {"large", large_images, 224, 196}};
  std::printf("%-6s %7s %9s %9s %14s %14s %8s\n", "set", "images", "jpeg", "crop", "1 thread img/s",
              "2 threads img/s", "scaling");
  std::string json = "{";
  double small_best = 0;
  for (const Set& set : sets) {
    const std::string prefix = (dir / set.name).string();
    const uint64_t bytes = WriteSet(prefix, set.count, set.side);
    const auto [one, two] = IterImagesPerSecond((*rt)->get(), prefix, set.crop);
    const double scaling = two / one;
    if (std::string(set.name) == "small") small_best = std::max(one, two);
    std::printf("%-6s %7d %6dx%-3d %6dx%-3d %14.0f %15.0f %8.2f\n", set.name, set.count, set.side,
                set.side, set.crop, set.crop, one, two, scaling);
    absl::StrAppendFormat(&json,
                          "\"%s_images_per_s_1_thread\": %.1f, \"%s_images_per_s_2_threads\": %.1f, "
                          "\"%s_thread_scaling\": %.3f, \"%s_mean_jpeg_bytes\": %.0f, ",
                          set.name, one, set.name, two, set.name, scaling, set.name,
                          static_cast<double>(bytes) / set.count);
  }
  std::filesystem::remove_all(dir);

  auto lenet = examples::LeNet();
  TESSERA_CHECK(lenet.ok());
  const double trainer = bench::TrainerSamplesPerSecond(
      (*rt)->get(), *lenet, bench::RandomBatches((*rt)->get(), Shape{64, 1, 28, 28}, 50));
  const double ratio = small_best / trainer;
  std::printf("LeNet trainer (batch 64): %.0f samples/s; iterator (small, best) / trainer: %.2f\n",
              trainer, ratio);
  absl::StrAppendFormat(&json, "\"lenet_trainer_samples_per_s\": %.1f, \"ratio_vs_lenet_trainer\": %.3f}",
                        trainer, ratio);
  std::printf("%s\n", json.c_str());
  return 0;
}
